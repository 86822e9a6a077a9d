package reader

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	"orderlog/ingest/batch"
	"orderlog/ingest/ledger"
	"orderlog/ingest/wal"
	"orderlog/internal/apierr"
	"orderlog/internal/etcdserver"
	"orderlog/internal/keys"
	"orderlog/proto/orderlogpb"
)

// fixture is a real single-store ledger setup: embedded etcd, one WAL store
// served over gRPC on loopback, a ledger writer.
type fixture struct {
	etcd   *clientv3.Client
	dialer *ledger.GRPCDialer
	writer *ledger.Writer
	source *LedgerSource
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	srv, err := etcdserver.Start(etcdserver.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	cli, err := srv.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	store, err := wal.Open(wal.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	grpcServer := wal.Serve(lis, store)
	dialer := ledger.NewGRPCDialer()
	t.Cleanup(func() {
		dialer.Close()
		grpcServer.Stop()
		store.Close()
		cli.Close()
		srv.Close()
	})
	if _, err := cli.Put(ctx, keys.SeqEpoch, "1"); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, keys.Ingest("reader-test"), ""); err != nil {
		t.Fatal(err)
	}
	w, err := ledger.Create(ctx, cli, ledger.CreateOptions{
		Epoch: 1, WriterIncarnation: "reader-test", AckQuorum: 1, Stores: dialer,
		Ensemble: []ledger.Member{{StoreID: store.StoreID(), Incarnation: store.Incarnation(), Address: lis.Addr().String()}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // before the stores and etcd go: it stops the writer's goroutines
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = w.Close(ctx)
	})
	return &fixture{etcd: cli, dialer: dialer, writer: w, source: NewLedgerSource(cli, dialer)}
}

// appendBatch writes records at [first, first+len) as one entry, waits for
// it to be confirmed and returns the entry id.
func (f *fixture) appendBatch(t *testing.T, first uint64, topics ...string) int64 {
	t.Helper()
	records := make([]batch.Record, len(topics))
	for i, topic := range topics {
		records[i] = batch.Record{Topic: topic, Key: []byte(fmt.Sprintf("k%d", (first+uint64(i))%2)), Value: []byte(fmt.Sprintf("v%d", first+uint64(i)))}
	}
	payload, err := batch.Encode(nil, batch.Header{Kind: batch.KindRecords, FirstOffset: first, Count: uint32(len(records)),
		IngestTimeMicros: 1000, Runs: []batch.ProducerRun{{ProducerID: 9, Epoch: 1, FirstSeq: first, Count: uint32(len(records))}}}, records)
	if err != nil {
		t.Fatal(err)
	}
	entry, err := f.writer.Append(payload, ledger.Span{First: first, End: first + uint64(len(records))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := f.writer.WaitConfirmed(ctx, entry); err != nil {
		t.Fatal(err)
	}
	return entry
}

func TestReadServesCommittedEntriesInOrderWithHolesSkipped(t *testing.T) {
	f := newFixture(t)
	ledgerID := f.writer.ID()
	e1 := f.appendBatch(t, 0, "a", "b", "a")
	e2 := f.appendBatch(t, 5, "b", "a")
	commits := NewCommitMap()
	must(t, commits.Resolve(1, Segment{First: 0, End: 3, Ledger: ledgerID, Entry: e1}))
	must(t, commits.Resolve(1, Segment{First: 3, End: 5, Hole: true}))
	must(t, commits.Resolve(1, Segment{First: 5, End: 7, Ledger: ledgerID, Entry: e2}))
	r := New(commits, f.source)
	ctx := context.Background()

	// Nothing is served above C, even though the stores hold it.
	must(t, commits.Advance(1, 3))
	page, err := r.ReadPage(ctx, 0, 100, Filter{})
	if err != nil || len(page.Messages) != 3 || page.NextOffset != 3 {
		t.Fatalf("page below C=3: %+v %v", page, err)
	}
	if _, err := r.ReadPage(ctx, 4, 100, Filter{}); apierr.As(err).Code != apierr.OffsetOutOfRange {
		t.Fatalf("read beyond C: %v", err)
	}

	must(t, commits.Advance(1, 7))
	var got []uint64
	var skipped []*orderlogpb.SkippedRange
	err = r.Stream(ctx, 1, 0, Filter{}, false, func(p *orderlogpb.ReadResponse) error {
		for _, m := range p.Messages {
			got = append(got, m.Offset)
			if string(m.Message.Value) != fmt.Sprintf("v%d", m.Offset) || m.ProducerId != 9 || m.ProducerSeq != m.Offset {
				t.Errorf("offset %d: %+v", m.Offset, m)
			}
		}
		skipped = append(skipped, p.Skipped...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != "[1 2 5 6]" || len(skipped) != 1 || skipped[0].First != 3 || skipped[0].End != 5 {
		t.Fatalf("got %v skipped %v", got, skipped)
	}

	// Query by topic and key keeps global order.
	page, err = r.ReadPage(ctx, 0, 100, Filter{Topic: "a", Key: []byte("k0")})
	if err != nil {
		t.Fatal(err)
	}
	var offsets []uint64
	for _, m := range page.Messages {
		offsets = append(offsets, m.Offset)
	}
	if fmt.Sprint(offsets) != "[0 2 6]" {
		t.Fatalf("query a/k0: %v", offsets)
	}
}

func TestReadRefusesAnEntryThatDisagreesWithTheMap(t *testing.T) {
	f := newFixture(t)
	e1 := f.appendBatch(t, 0, "a", "b")
	commits := NewCommitMap()
	must(t, commits.Resolve(1, Segment{First: 0, End: 3, Ledger: f.writer.ID(), Entry: e1})) // wrong length
	must(t, commits.Advance(1, 3))
	if _, err := New(commits, f.source).ReadPage(context.Background(), 0, 10, Filter{}); apierr.As(err).Code != apierr.Internal {
		t.Fatalf("mismatched entry served: %v", err)
	}
}

func TestTailFollowsC(t *testing.T) {
	f := newFixture(t)
	commits := NewCommitMap()
	r := New(commits, f.source)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	seen := make(chan uint64, 10)
	go func() {
		_ = r.Stream(ctx, 0, 0, Filter{}, true, func(p *orderlogpb.ReadResponse) error {
			for _, m := range p.Messages {
				seen <- m.Offset
			}
			return nil
		})
	}()
	e1 := f.appendBatch(t, 0, "a")
	must(t, commits.Resolve(1, Segment{First: 0, End: 1, Ledger: f.writer.ID(), Entry: e1}))
	must(t, commits.Advance(1, 1))
	e2 := f.appendBatch(t, 1, "a")
	must(t, commits.Resolve(1, Segment{First: 1, End: 2, Ledger: f.writer.ID(), Entry: e2}))
	must(t, commits.Advance(1, 2))
	for want := uint64(0); want < 2; want++ {
		select {
		case got := <-seen:
			if got != want {
				t.Fatalf("tail got %d, want %d", got, want)
			}
		case <-ctx.Done():
			t.Fatal("tail did not deliver")
		}
	}
}

// memEntries is an EntrySource over encoded entries in memory.
type memEntries map[int64][]byte

func (m memEntries) ReadEntry(_ context.Context, _ uint64, entry int64) ([]byte, error) {
	if p, ok := m[entry]; ok {
		return p, nil
	}
	return nil, fmt.Errorf("no entry %d", entry)
}

// TestPagesExamineABoundedStretch: a query that matches only the last of
// 3,000 one-message entries answers each page after PageSegments entries,
// with no message and NextOffset below C, and a stream still finds it.
func TestPagesExamineABoundedStretch(t *testing.T) {
	const n = 3000
	entries := memEntries{}
	commits := NewCommitMap()
	for i := range int64(n) {
		topic := "a"
		if i == n-1 {
			topic = "b"
		}
		p, err := batch.Encode(nil, batch.Header{Kind: batch.KindRecords, FirstOffset: uint64(i), Count: 1, Runs: []batch.ProducerRun{{Count: 1}}},
			[]batch.Record{{Topic: topic, Value: []byte("v")}})
		if err != nil {
			t.Fatal(err)
		}
		entries[i] = p
		must(t, commits.Resolve(1, Segment{First: uint64(i), End: uint64(i) + 1, Ledger: 1, Entry: i}))
	}
	must(t, commits.Advance(1, n))
	r := New(commits, entries)
	ctx := context.Background()
	page, err := r.ReadPage(ctx, 0, 10, Filter{Topic: "b"})
	if err != nil || len(page.Messages) != 0 || page.NextOffset != PageSegments || page.Committed != n {
		t.Fatalf("first page: %+v, %v", page, err)
	}
	all, err := r.ReadPage(ctx, 0, n, Filter{})
	if err != nil || len(all.Messages) != PageSegments || all.NextOffset != PageSegments {
		t.Fatalf("unfiltered page: %d messages, next %d, %v", len(all.Messages), all.NextOffset, err)
	}
	var found []uint64
	err = r.Stream(ctx, 0, 0, Filter{Topic: "b"}, false, func(p *orderlogpb.ReadResponse) error {
		for _, m := range p.Messages {
			found = append(found, m.Offset)
		}
		return nil
	})
	if err != nil || len(found) != 1 || found[0] != n-1 {
		t.Fatalf("stream found %v, %v", found, err)
	}
}

// TestPagesCountHeaders: messages whose bytes are nearly all headers still
// make pages of at most PageBytes encoded (plus the one message a page
// always holds), and a stream reads every one of them, in order.
func TestPagesCountHeaders(t *testing.T) {
	const entriesN, perEntry = 4, 100
	header := []batch.MessageHeader{{Key: "trace", Value: bytes.Repeat([]byte{'h'}, 60<<10)}}
	entries := memEntries{}
	commits := NewCommitMap()
	for i := range int64(entriesN) {
		records := make([]batch.Record, perEntry)
		for k := range records {
			records[k] = batch.Record{Topic: "t", Value: []byte("v"), Headers: header, MessageID: []byte(fmt.Sprint(i, k))}
		}
		first := uint64(i) * perEntry
		p, err := batch.Encode(nil, batch.Header{Kind: batch.KindRecords, FirstOffset: first, Count: perEntry, Runs: []batch.ProducerRun{{Count: perEntry}}}, records)
		if err != nil {
			t.Fatal(err)
		}
		entries[i] = p
		must(t, commits.Resolve(1, Segment{First: first, End: first + perEntry, Ledger: 1, Entry: i}))
	}
	must(t, commits.Advance(1, entriesN*perEntry))
	r := New(commits, entries)
	var next uint64
	pages := 0
	err := r.Stream(context.Background(), 0, 0, Filter{}, false, func(p *orderlogpb.ReadResponse) error {
		pages++
		size := 0
		for _, m := range p.Messages {
			if m.Offset != next {
				t.Fatalf("message at %d, want %d", m.Offset, next)
			}
			next++
			size += proto.Size(m)
		}
		if last := proto.Size(p.Messages[len(p.Messages)-1]); size-last > PageBytes {
			t.Fatalf("page of %d messages encodes to %d bytes, over %d before its last message", len(p.Messages), size, PageBytes)
		}
		return nil
	})
	if err != nil || next != entriesN*perEntry {
		t.Fatalf("stream read %d messages in %d pages: %v", next, pages, err)
	}
}

// TestReadsWaitForTheFirstWatermark: before a leader's watermark arrives,
// C = 0 is only where this process started, so reads are refused as
// UNAVAILABLE (retry) rather than answered as an empty log or as offsets
// beyond C; a leader change keeps the older leader's C in service.
func TestReadsWaitForTheFirstWatermark(t *testing.T) {
	p, err := batch.Encode(nil, batch.Header{Kind: batch.KindRecords, FirstOffset: 0, Count: 1, Runs: []batch.ProducerRun{{Count: 1}}},
		[]batch.Record{{Topic: "t", Value: []byte("v")}})
	if err != nil {
		t.Fatal(err)
	}
	commits := NewCommitMap()
	r := New(commits, memEntries{0: p})
	ctx := context.Background()
	must(t, commits.Resolve(3, Segment{First: 0, End: 1, Ledger: 1, Entry: 0}))
	for _, from := range []uint64{0, 1, 500} {
		if _, err := r.ReadPage(ctx, from, 10, Filter{}); apierr.As(err).Code != apierr.Unavailable {
			t.Fatalf("read from %d before any watermark: %v, want UNAVAILABLE", from, err)
		}
	}
	if epoch, _ := commits.Committed(); epoch != 0 {
		t.Fatalf("epoch %d reported before any watermark", epoch)
	}
	must(t, commits.Advance(3, 1))
	page, err := r.ReadPage(ctx, 0, 10, Filter{})
	if err != nil || len(page.Messages) != 1 || page.Committed != 1 {
		t.Fatalf("read after the watermark: %+v, %v", page, err)
	}
	// A newer leader's first records arrive before its watermark: the map
	// still serves what the older one committed.
	must(t, commits.Resolve(4, Segment{First: 1, End: 2, Hole: true}))
	if epoch, c := commits.Committed(); epoch != 3 || c != 1 {
		t.Fatalf("after the newer epoch's first record: epoch %d, C %d; want 3, 1", epoch, c)
	}
	if page, err := r.ReadPage(ctx, 0, 10, Filter{}); err != nil || len(page.Messages) != 1 {
		t.Fatalf("read during the leader change: %+v, %v", page, err)
	}
	if _, err := r.ReadPage(ctx, 5, 10, Filter{}); apierr.As(err).Code != apierr.OffsetOutOfRange {
		t.Fatalf("read beyond C once in step: %v, want OFFSET_OUT_OF_RANGE", err)
	}
	must(t, commits.Advance(4, 1)) // a watermark that does not move C still syncs
	if epoch, _ := commits.Committed(); epoch != 4 {
		t.Fatalf("epoch %d after the newer leader's watermark, want 4", epoch)
	}
}
