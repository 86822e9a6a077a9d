package sequencer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"orderlog/ingest/ledger"
	pb "orderlog/proto/sequencerpb"
)

// checkpointEvery configures nodes to checkpoint every few records and to
// retain few, so a short test crosses several checkpoints and trims.
func checkpointEvery(records int) func(*Config) {
	return func(cfg *Config) {
		cfg.Checkpoint = CheckpointConfig{Records: records, Interval: time.Hour, ChunkSegments: 4, PageChunks: 2}
		cfg.RetainRecords = 16
	}
}

// readCheckpointedMap is readCommitMap for a log with checkpoints: the
// newest checkpoint's chunks, read from its ledger, then the leader's
// stream from the checkpoint's end (again from a newer checkpoint if the
// leader has trimmed past it).
func readCheckpointedMap(ctx context.Context, t *testing.T, c *testCluster, atLeast uint64) (map[uint64]EpochRecord, uint64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		decided, cw, err := readCheckpointedMapOnce(ctx, c, atLeast)
		if err == nil {
			return decided, cw
		}
		if time.Now().After(deadline) {
			t.Fatalf("commit map: %v (C=%d, want ≥ %d)", err, cw, atLeast)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func readCheckpointedMapOnce(ctx context.Context, c *testCluster, atLeast uint64) (map[uint64]EpochRecord, uint64, error) {
	decided := map[uint64]EpochRecord{}
	p, err := ReadCheckpoint(ctx, c.cli)
	if err != nil {
		return nil, 0, err
	}
	cw := p.End
	if !p.IsZero() {
		lc := c.ledgerControl(c.cli)
		ix, err := readCheckpointIndex(ctx, lc, p)
		if err != nil {
			return nil, 0, err
		}
		var refs []ChunkRef
		for _, pg := range ix.Pages {
			chunks, err := readCheckpointPage(ctx, lc, pg)
			if err != nil {
				return nil, 0, err
			}
			refs = append(refs, chunks...)
		}
		for _, ref := range refs {
			payloads, err := lc.ReadEntries(ctx, ref.Ledger, ref.Entry, ref.Entry)
			if err != nil {
				return nil, 0, err
			}
			segs, err := DecodeCheckpointChunk(payloads[0])
			if err != nil {
				return nil, 0, err
			}
			for _, s := range segs {
				if err := decide(decided, EpochRecord{Record: s}); err != nil {
					return nil, 0, err
				}
			}
		}
	}
	addr, err := LeaderAddress(ctx, c.cli)
	if err != nil || addr == "" {
		return nil, 0, fmt.Errorf("no leader: %v", err)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, 0, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	stream, err := pb.NewSequencerClient(conn).CommitMap(ctx, &pb.CommitMapRequest{FromOffset: p.End})
	if err != nil {
		return nil, 0, err
	}
	for cw < atLeast {
		f, err := stream.Recv()
		if err != nil {
			return nil, cw, err
		}
		for _, rp := range f.Records {
			r := RecordFromProto(rp)
			if r.Kind == KindWatermark {
				cw = max(cw, r.Watermark)
			} else if err := decide(decided, r); err != nil {
				return nil, cw, err
			}
		}
	}
	return decided, cw, nil
}

// decide records r's offsets, refusing a second, different decision.
func decide(decided map[uint64]EpochRecord, r EpochRecord) error {
	for x := r.Range.First; x < r.Range.End; x++ {
		if old, ok := decided[x]; ok && (old.Kind != r.Kind || old.Ledger != r.Ledger || old.Entry != r.Entry) {
			return fmt.Errorf("offset %d decided %v then %v", x, old, r)
		}
		decided[x] = r
	}
	return nil
}

// sameBelow fails unless two maps decide every offset below c alike.
func sameBelow(t *testing.T, a, b map[uint64]EpochRecord, c uint64) {
	t.Helper()
	for x := uint64(0); x < c; x++ {
		if a[x].Record.Kind != b[x].Record.Kind || a[x].Ledger != b[x].Ledger || a[x].Entry != b[x].Entry {
			t.Fatalf("offset %d decided %v, then %v", x, a[x], b[x])
		}
	}
}

// waitCheckpoint waits for a checkpoint of epoch (any, if 0) whose
// replaced commit ledgers have left the list, and returns it and the list.
func waitCheckpoint(ctx context.Context, t *testing.T, c *testCluster, epoch uint64, after uint64) (CheckpointPointer, commitLedgerList) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		h, err := readHead(ctx, c.cli)
		if err != nil {
			t.Fatal(err)
		}
		p := h.pointer
		if !p.IsZero() && (epoch == 0 || p.Epoch == epoch) && p.Ledger > after &&
			len(h.list.Ledgers) > 0 && h.list.Ledgers[0].Ledger == p.FirstKept {
			return p, h.list
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no checkpoint of epoch %d after ledger %d with a truncated list", epoch, after)
	return CheckpointPointer{}, commitLedgerList{}
}

func leaderOf(nodes []*testNode) *testNode {
	return slices.MaxFunc(nodes, func(a, b *testNode) int { return cmp.Compare(a.node.Status().Epoch, b.node.Status().Epoch) })
}

// TestCheckpointTruncatesTheLogAndANewLeaderStartsFromIt: a leader
// checkpoints the commit log, deletes the commit ledgers it replaced and
// drops them from the list; a subscriber from offset 0 is below the
// retained records then, and the checkpoint plus the stream from its end
// is the whole map. A standby takes over reading only the list from the
// checkpoint on and serves the same map.
func TestCheckpointTruncatesTheLogAndANewLeaderStartsFromIt(t *testing.T) {
	ctx := context.Background()
	c := newTestCluster(t)
	c.configure = checkpointEvery(30)
	nodes := []*testNode{c.startNode(), c.startNode()}
	c.waitServing(nodes...)
	first, _, err := (&epochStore{cli: c.cli}).commitLedgers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	in := c.newIngest(ctx, "ingest-a")
	if err := in.connect(ctx); err != nil {
		t.Fatal(err)
	}
	in.produce(ctx, 80)
	p, list := waitCheckpoint(ctx, t, c, 0, 0)
	if slices.Contains(list.ids(), first.ids()[0]) {
		t.Fatalf("list %v still names the first commit ledger %d", list.ids(), first.ids()[0])
	}
	if _, err := ledger.Get(ctx, c.cli, first.ids()[0]); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("replaced commit ledger %d: %v, want it deleted", first.ids()[0], err)
	}
	if p.End == 0 || p.C < p.End {
		t.Fatalf("checkpoint %+v covers nothing", p)
	}
	if n := countMetrics(NewCollector(leaderOf(nodes).node)); n != 8 {
		t.Fatalf("leader exports %d metrics, want 8 (6 of checkpoints, 2 of writer-closed ledgers)", n)
	}
	if err := subscribeFromZero(ctx, c); status.Code(err) != codes.OutOfRange {
		t.Fatalf("subscription from 0 after trimming: %v, want OUT_OF_RANGE", err)
	}
	end := in.acked[len(in.acked)-1].Range.End
	before, cBefore := readCheckpointedMap(ctx, t, c, end)
	checkCommitMap(t, before, cBefore, in)

	standby := nodes[0]
	if standby.node.Status().Leader {
		standby = nodes[1]
	}
	// The standby folds the checkpoint and the closed ledgers after it
	// while it waits, so its takeover reads only the last one.
	waitCheckpointIdle(t, leaderOf(nodes))
	h, ids := waitWarmedHead(ctx, t, c, standby)
	standby.ledgers.takeoverReads()
	c.revokeLeader(ctx)
	in.writeOrRegrant(ctx, in.grantAfterFailover(ctx, t, 3))
	in.produce(ctx, 10)
	if reads := standby.ledgers.takeoverReads(); !slices.Equal(reads, ids[len(ids)-1:]) {
		t.Fatalf("the new leader read commit ledgers %v; want only the last of %v after checkpoint %d", reads, ids, h.pointer.Ledger)
	}
	after, cAfter := readCheckpointedMap(ctx, t, c, in.acked[len(in.acked)-1].Range.End)
	checkCommitMap(t, after, cAfter, in)
	sameBelow(t, before, after, cBefore)
}

func subscribeFromZero(ctx context.Context, c *testCluster) error {
	addr, err := LeaderAddress(ctx, c.cli)
	if err != nil {
		return err
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	stream, err := pb.NewSequencerClient(conn).CommitMap(ctx, &pb.CommitMapRequest{FromOffset: 0})
	if err != nil {
		return err
	}
	_, err = stream.Recv()
	return err
}

// TestCrashDuringACheckpointLeavesTheSameMap: the leader stops (its
// session revoked, nothing more done) after each step of a checkpoint; a
// standby takes over from what is left, serves the map every acknowledged
// offset is in, and writes its own checkpoints on top.
func TestCrashDuringACheckpointLeavesTheSameMap(t *testing.T) {
	for _, step := range []string{"appended", "sealed", "switched", "deleted", "truncated"} {
		t.Run(step, func(t *testing.T) {
			ctx := context.Background()
			c := newTestCluster(t)
			c.configure = checkpointEvery(30)
			var crashed atomic.Bool
			var victim atomic.Pointer[Node]
			c.checkpointStep = func(n *Node, s string) error {
				// The second checkpoint crashes, so the first one's
				// ledgers are there to be tidied again.
				if s != step || n.CheckpointStatus().Written == 0 || victim.Load() != nil && victim.Load() != n {
					return nil
				}
				victim.Store(n)
				if crashed.Swap(true) {
					return errors.New("crashed already")
				}
				c.revokeLeader(ctx)
				return errors.New("crash at " + step)
			}
			nodes := []*testNode{c.startNode(), c.startNode()}
			c.waitServing(nodes...)
			in := c.newIngest(ctx, "ingest-a")
			if err := in.connect(ctx); err != nil {
				t.Fatal(err)
			}
			for i := 0; !crashed.Load(); i++ {
				if i == 100 {
					t.Fatal("no checkpoint reached the step")
				}
				in.produce(ctx, 5)
			}
			in.writeOrRegrant(ctx, in.grantAfterFailover(ctx, t, 3))
			in.produce(ctx, 10)
			decided, cw := readCheckpointedMap(ctx, t, c, in.acked[len(in.acked)-1].Range.End)
			checkCommitMap(t, decided, cw, in)
			// The successor's own checkpoint builds on what was left.
			epoch := leaderOf(nodes).node.Status().Epoch
			in.produce(ctx, 40)
			p, _ := waitCheckpoint(ctx, t, c, epoch, 0)
			again, cAgain := readCheckpointedMap(ctx, t, c, in.acked[len(in.acked)-1].Range.End)
			checkCommitMap(t, again, cAgain, in)
			sameBelow(t, decided, again, cw)
			if p.End < cw {
				t.Logf("successor's checkpoint ends at %d, below the C %d read before", p.End, cw)
			}
		})
	}
}

// countMetrics counts the metrics c collects.
func countMetrics(c prometheus.Collector) int {
	ch := make(chan prometheus.Metric, 64)
	c.Collect(ch)
	close(ch)
	return len(ch)
}

// waitWarmedHead waits until n's replay cache covers the newest
// checkpoint and the closed commit ledgers after it (a checkpoint still
// in progress may move them meanwhile), and returns the head and the kept
// ledgers.
func waitWarmedHead(ctx context.Context, t *testing.T, c *testCluster, n *testNode) (commitLogHead, []uint64) {
	t.Helper()
	deadline := time.Now().Add(4 * warmEvery)
	for {
		h, err := readHead(ctx, c.cli)
		if err != nil {
			t.Fatal(err)
		}
		kept, err := h.kept()
		if err != nil {
			t.Fatal(err)
		}
		ids := kept.ids()
		if len(ids) == 1 || n.node.replays.coversFrom(h.pointer.Ledger, ids[:len(ids)-1]) {
			return h, ids
		}
		if time.Now().After(deadline) {
			t.Fatalf("standby %s never replayed checkpoint %d and the closed commit ledgers of %v", n.addr, h.pointer.Ledger, ids)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitCheckpointIdle waits until n's leader has no checkpoint in progress
// (none starts while nothing is produced).
func waitCheckpointIdle(t *testing.T, n *testNode) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		l := n.node.leader()
		if l == nil {
			return
		}
		l.mu.Lock()
		busy := l.mu.checkpointing
		l.mu.Unlock()
		if !busy {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the leader's checkpoint never ended")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestTakeoverReadsDoNotGrowWithHistory: with checkpoints, what a cold
// takeover (no warm standby cache: the standby starts after the history)
// reads is the checkpoint's state and the commit ledgers after it, for a
// history of 100 batches as for one of 1,000.
func TestTakeoverReadsDoNotGrowWithHistory(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 1,100 batches")
	}
	var reads []int
	for i, batches := range []int{100, 1000, 1000} {
		ctx := context.Background()
		c := newTestCluster(t)
		c.configure = checkpointEvery(40)
		if i == 2 { // the same without checkpoints, for comparison
			c.configure = func(cfg *Config) { cfg.Checkpoint.Records = -1 }
		}
		leader := c.startNode()
		c.waitServing(leader)
		in := c.newIngest(ctx, "ingest-a")
		if err := in.connect(ctx); err != nil {
			t.Fatal(err)
		}
		in.produce(ctx, batches)
		waitCheckpointIdle(t, leader)
		standby := c.startNode()
		c.revokeLeader(ctx)
		in.writeOrRegrant(ctx, in.grantAfterFailover(ctx, t, 3))
		elected := standby.terms.waitElected(t, 0)
		entries := standby.ledgers.takeoverEntries()
		t.Logf("history of %d batches, checkpoints every %d records: the takeover read %d commit entries, took %v",
			batches, c.configureRecords(), entries, elected.Took)
		reads = append(reads, entries)
		decided, cw := readCheckpointedMap(ctx, t, c, in.acked[len(in.acked)-1].Range.End)
		checkCommitMap(t, decided, cw, in)
	}
	// A checkpoint every 40 records, two records per batch or so: at
	// most ~40 entries since the last, whatever came before.
	if reads[1] > 60 || reads[0] > 60 || reads[2] < 500 {
		t.Fatalf("takeovers read %v commit entries after 100 and 1,000 batches, and 1,000 without checkpoints", reads)
	}
}

func (c *testCluster) configureRecords() int {
	var cfg Config
	c.configure(&cfg)
	return cfg.Checkpoint.Records
}

// TestATakeoverOverALongReplayCheckpointsSoon: the leader's checkpoints
// fail, so its map keeps more records than the new leader keeps (beyond
// the hard bound, 4 × RetainRecords); the new leader trims the replay
// above the last checkpoint, and its next checkpoint is due at once (the
// replayed records count toward it), so a reader that starts from the
// checkpoint is served again without waiting for more records.
func TestATakeoverOverALongReplayCheckpointsSoon(t *testing.T) {
	ctx := context.Background()
	c := newTestCluster(t)
	c.configure = checkpointEvery(30)
	var failing atomic.Pointer[Node]
	c.checkpointStep = func(n *Node, s string) error {
		if s == "appended" && failing.Load() == n {
			return errors.New("checkpoints fail on the first leader")
		}
		return nil
	}
	nodes := []*testNode{c.startNode(), c.startNode()}
	c.waitServing(nodes...)
	failing.Store(leaderOf(nodes).node)
	in := c.newIngest(ctx, "ingest-a")
	if err := in.connect(ctx); err != nil {
		t.Fatal(err)
	}
	for len(in.acked) < 4*16+20 { // more than the new leader keeps past the checkpoint
		in.produce(ctx, 5)
	}
	c.revokeLeader(ctx)
	in.writeOrRegrant(ctx, in.grantAfterFailover(ctx, t, 3))
	in.produce(ctx, 2) // far fewer than a checkpoint's 30 records
	decided, cw := readCheckpointedMap(ctx, t, c, in.acked[len(in.acked)-1].Range.End)
	checkCommitMap(t, decided, cw, in)
}
