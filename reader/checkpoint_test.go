package reader

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"orderlog/ingest/ledger"
	"orderlog/internal/keys"
	"orderlog/proto/orderlogpb"
	pb "orderlog/proto/sequencerpb"
	"orderlog/sequencer"
)

// retainingLeader serves the commit-map stream of a leader that retains
// only the records from floor on: a subscription below it is OUT_OF_RANGE.
type retainingLeader struct {
	pb.UnimplementedSequencerServer
	floor   uint64
	records []sequencer.EpochRecord // every record, log order, watermark last
}

func (l *retainingLeader) CommitMap(req *pb.CommitMapRequest, stream grpc.ServerStreamingServer[pb.CommitMapFrame]) error {
	if req.FromOffset < l.floor {
		return status.Error(codes.OutOfRange, sequencer.ErrBelowRetention.Error())
	}
	frame := &pb.CommitMapFrame{Epoch: 1}
	for _, r := range l.records {
		if r.Kind == sequencer.KindWatermark || r.Range.End > req.FromOffset {
			frame.Records = append(frame.Records, sequencer.RecordToProto(r))
		}
	}
	if err := stream.Send(frame); err != nil {
		return err
	}
	<-stream.Context().Done()
	return nil
}

// checkpointLog writes 40 batches (with a hole after every fifth) and
// returns their segments in offset order.
func checkpointLog(t *testing.T, f *fixture) []Segment {
	var segs []Segment
	next := uint64(0)
	for i := 0; i < 40; i++ {
		topics := []string{"a", "b", "a"}[:1+i%3]
		entry := f.appendBatch(t, next, topics...)
		segs = append(segs, Segment{First: next, End: next + uint64(len(topics)), Ledger: f.writer.ID(), Entry: entry})
		next += uint64(len(topics))
		if i%5 == 4 {
			segs = append(segs, Segment{First: next, End: next + 3, Hole: true})
			next += 3
		}
	}
	return segs
}

func toRecord(s Segment) sequencer.Record {
	if s.Hole {
		return sequencer.Record{Kind: sequencer.KindHole, Range: sequencer.Range{First: s.First, End: s.End}}
	}
	return sequencer.Record{Kind: sequencer.KindWritten, Range: sequencer.Range{First: s.First, End: s.End}, Ledger: s.Ledger, Entry: s.Entry}
}

// writeCheckpoint writes segs as a checkpoint ledger (chunks of 4
// segments, a state, an index) and points seq/checkpoint at it.
func writeCheckpoint(t *testing.T, f *fixture, segs []Segment) sequencer.CheckpointPointer {
	ctx := context.Background()
	w, err := ledger.Create(ctx, f.etcd, ledger.CreateOptions{Epoch: 1, WriterIncarnation: "reader-test", AckQuorum: 1,
		Stores: f.dialer, Ensemble: f.writer.Metadata().Ensemble})
	if err != nil {
		t.Fatal(err)
	}
	var refs []sequencer.ChunkRef
	end := segs[0].First
	for i := 0; i < len(segs); i += 4 {
		var chunk []sequencer.Record
		for _, s := range segs[i:min(i+4, len(segs))] {
			chunk = append(chunk, toRecord(s))
		}
		entry, err := w.Append(sequencer.EncodeCheckpointChunk(nil, chunk), ledger.Span{})
		if err != nil {
			t.Fatal(err)
		}
		ref := sequencer.ChunkRef{Ledger: w.ID(), Entry: entry, Range: sequencer.Range{First: end, End: chunk[len(chunk)-1].Range.End}}
		for _, r := range chunk {
			if r.Kind == sequencer.KindHole {
				ref.Holes += r.Range.Len()
			}
		}
		refs, end = append(refs, ref), ref.Range.End
	}
	// Pages of 3 chunks.
	ix := sequencer.CheckpointIndex{Epoch: 1, Start: segs[0].First, End: segs[0].First}
	for i := 0; i < len(refs); i += 3 {
		page := refs[i:min(i+3, len(refs))]
		entry, err := w.Append(sequencer.EncodeCheckpointPage(nil, page), ledger.Span{})
		if err != nil {
			t.Fatal(err)
		}
		pg := sequencer.PageRef{Ledger: w.ID(), Entry: entry, Range: sequencer.Range{First: page[0].Range.First, End: page[len(page)-1].Range.End},
			FirstLedger: w.ID()}
		for _, c := range page {
			pg.Holes += c.Holes
		}
		ix.Pages, ix.End, ix.Holes = append(ix.Pages, pg), pg.Range.End, ix.Holes+pg.Holes
	}
	stateEntry, err := w.Append(sequencer.EncodeCheckpointState(nil, sequencer.CheckpointState{Epoch: 1, C: ix.End, Folded: 1}), ledger.Span{})
	if err != nil {
		t.Fatal(err)
	}
	indexEntry, err := w.Append(sequencer.EncodeCheckpointIndex(nil, ix), ledger.Span{})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.WaitConfirmed(ctx, indexEntry); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	p := sequencer.CheckpointPointer{Version: 1, Ledger: w.ID(), StateEntry: stateEntry, IndexEntry: indexEntry,
		Start: 0, End: ix.End, C: ix.End, Epoch: 1}
	b, _ := json.Marshal(p)
	if _, err := f.etcd.Put(ctx, keys.SeqCheckpoint, string(b)); err != nil {
		t.Fatal(err)
	}
	return p
}

// readAll reads [from, C) page by page.
func readAll(t *testing.T, r *Reader, from uint64, filter Filter) []*orderlogpb.ReadResponse {
	t.Helper()
	var pages []*orderlogpb.ReadResponse
	err := r.Stream(context.Background(), from, 0, filter, false, func(p *orderlogpb.ReadResponse) error {
		pages = append(pages, p)
		return nil
	})
	if err != nil {
		t.Fatalf("read from %d: %v", from, err)
	}
	return pages
}

// TestFreshReaderStartsFromACheckpoint: the leader retains only the
// records after the checkpoint; a fresh reader gets OUT_OF_RANGE from 0,
// loads the checkpoint's index, subscribes from its end and becomes ready;
// every read (from each offset, filtered or not) is identical to a
// reader's that holds the whole map in memory, and it keeps a bounded
// window in memory.
func TestFreshReaderStartsFromACheckpoint(t *testing.T) {
	f := newFixture(t)
	pageSegments := 3
	segs := checkpointLog(t, f)
	split := 30 // segments below the checkpoint's end
	p := writeCheckpoint(t, f, segs[:split])

	leader := &retainingLeader{floor: p.End}
	for _, s := range segs {
		leader.records = append(leader.records, sequencer.EpochRecord{Epoch: 1, Record: toRecord(s)})
	}
	total := segs[len(segs)-1].End
	leader.records = append(leader.records, sequencer.EpochRecord{Epoch: 1, Record: sequencer.Record{Kind: sequencer.KindWatermark, Watermark: total}})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	pb.RegisterSequencerServer(g, leader)
	go g.Serve(lis)
	defer g.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := f.etcd.Put(ctx, keys.SeqElection+"/1", lis.Addr().String()); err != nil {
		t.Fatal(err)
	}

	// The reference holds every segment in memory.
	whole := NewCommitMap()
	for _, s := range segs {
		must(t, whole.Resolve(1, s))
	}
	must(t, whole.Advance(1, total))
	reference := New(whole, f.source)
	reference.PageMessages = pageSegments

	commits := NewCommitMapWith(CommitMapConfig{WindowSegments: 4, CachedChunks: 2})
	fresh := New(commits, f.source)
	fresh.PageMessages = pageSegments
	followCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		Follow(followCtx, f.etcd, commits, FollowConfig{Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	}()
	defer func() { stop(); <-done }()
	for {
		if epoch, c := commits.Committed(); epoch == 1 && c == total {
			break
		}
		select {
		case <-ctx.Done():
			_, c := commits.Committed()
			t.Fatalf("fresh reader not ready: C = %d, want %d", c, total)
		case <-time.After(10 * time.Millisecond):
		}
	}
	if got, want := commits.HoleOffsets(), whole.HoleOffsets(); got != want {
		t.Fatalf("hole offsets %d, want %d", got, want)
	}
	if window, cached := commits.Resident(); window > len(segs)-split || cached > 2*4 {
		t.Fatalf("resident: %d window, %d cached segments", window, cached)
	}
	for from := uint64(0); from < total; from++ {
		for _, filter := range []Filter{{}, {Topic: "b"}} {
			want, got := readAll(t, reference, from, filter), readAll(t, fresh, from, filter)
			if len(got) != len(want) {
				t.Fatalf("from %d: %d pages, want %d", from, len(got), len(want))
			}
			for i := range want {
				if !proto.Equal(got[i], want[i]) {
					t.Fatalf("from %d page %d:\n got %v\nwant %v", from, i, got[i], want[i])
				}
			}
		}
	}
	if seg, ok := commits.Lookup(2); !ok || seg != segs[1] {
		t.Fatalf("lookup below the window: %v %v, want %v", seg, ok, segs[1])
	}
}

// chunkEntries serves checkpoint chunks from memory, counting reads.
type chunkEntries struct {
	chunks map[int64][]byte
	reads  int
}

func (c *chunkEntries) ReadEntry(_ context.Context, _ uint64, entry int64) ([]byte, error) {
	c.reads++
	return c.chunks[entry], nil
}

// TestInstallCheckpointOnARunningMap: a map that holds everything keeps
// its segments until the window is full, then drops those the checkpoint
// holds; lookups below the window load one chunk (cached), and C and the
// hole count do not change.
func TestInstallCheckpointOnARunningMap(t *testing.T) {
	m := NewCommitMapWith(CommitMapConfig{WindowSegments: 6, CachedChunks: 1})
	var segs []Segment
	for x := uint64(0); x < 10; x++ {
		s := Segment{First: 2 * x, End: 2*x + 2, Ledger: 3, Entry: int64(x)}
		if x%3 == 0 {
			s = Segment{First: 2 * x, End: 2*x + 2, Hole: true}
		}
		segs = append(segs, s)
		must(t, m.Resolve(1, s))
	}
	must(t, m.Advance(1, 20))
	holes := m.HoleOffsets()
	entries := &chunkEntries{chunks: map[int64][]byte{}}
	var refs []sequencer.ChunkRef
	for i := 0; i < 8; i += 4 { // two chunks: [0,8) and [8,16)
		var recs []sequencer.Record
		for _, s := range segs[i : i+4] {
			recs = append(recs, toRecord(s))
		}
		entries.chunks[int64(i/4)] = sequencer.EncodeCheckpointChunk(nil, recs)
		refs = append(refs, sequencer.ChunkRef{Ledger: 9, Entry: int64(i / 4), Range: sequencer.Range{First: segs[i].First, End: segs[i+3].End}})
	}
	entries.chunks[2] = sequencer.EncodeCheckpointPage(nil, refs) // one page
	ix := sequencer.CheckpointIndex{Epoch: 1, End: 16, Pages: []sequencer.PageRef{{Ledger: 9, Entry: 2, Range: sequencer.Range{First: 0, End: 16}, FirstLedger: 9}}}
	must(t, m.InstallCheckpoint(newCheckpoint(sequencer.CheckpointPointer{}, ix, entries, 1)))
	if window, _ := m.Resident(); window != 2 {
		t.Fatalf("window of %d segments after the checkpoint, want the 2 above it", window)
	}
	if _, c := m.Committed(); c != 20 || m.HoleOffsets() != holes {
		t.Fatalf("C %d holes %d, want 20 and %d", c, m.HoleOffsets(), holes)
	}
	for i, s := range segs {
		if got, ok := m.Lookup(s.First + 1); !ok || got != s {
			t.Fatalf("segment %d: %v %v, want %v", i, got, ok, s)
		}
	}
	if entries.reads != 3 {
		t.Fatalf("%d entry reads for one page and two chunks looked up in order", entries.reads)
	}
	if n := countMetrics(NewCollector(m)); n != 3 {
		t.Fatalf("%d metrics, want 3", n)
	}
	got, _ := m.Range(6, 12, 10) // across the chunk boundary
	if len(got) != 3 || got[0] != segs[3] || got[2] != segs[5] {
		t.Fatalf("range [6,12): %v", got)
	}
}

// countMetrics counts the metrics c collects.
func countMetrics(c prometheus.Collector) int {
	ch := make(chan prometheus.Metric, 64)
	c.Collect(ch)
	close(ch)
	return len(ch)
}
