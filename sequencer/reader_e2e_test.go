package sequencer_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"orderlog/reader"
	"orderlog/sequencer"
)

// TestFreshReaderBecomesReadyAfterCheckpoints: with a leader retaining 16
// records and checkpointing every 30, a reader started after hundreds of
// records subscribes below the retained ones, starts from the newest
// checkpoint and becomes ready with the same map the log holds — before
// and after a failover — keeping a window of at most a few segments.
func TestFreshReaderBecomesReadyAfterCheckpoints(t *testing.T) {
	tc := sequencer.StartCluster(t, sequencer.CheckpointEvery(30))
	tc.Produce(150)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	commits := reader.NewCommitMapWith(reader.CommitMapConfig{WindowSegments: 8, CachedChunks: 2})
	reader.New(commits, reader.NewLedgerSource(tc.Etcd(), tc.Stores()))
	followCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		reader.Follow(followCtx, tc.Etcd(), commits, reader.FollowConfig{Logger: slog.New(slog.NewTextHandler(t.Output(), nil)),
			CheckpointRefresh: 50 * time.Millisecond})
	}()
	defer func() { stop(); <-done }()

	check := func(when string) {
		t.Helper()
		end := tc.AckedEnd()
		start := time.Now()
		for {
			if epoch, c := commits.Committed(); epoch != 0 && c >= end {
				break
			}
			if ctx.Err() != nil {
				_, c := commits.Committed()
				t.Fatalf("%s: reader not ready: C = %d, want ≥ %d", when, c, end)
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Logf("%s: reader ready at C ≥ %d after %v", when, end, time.Since(start))
		decided, c := tc.Decided(end)
		_, readerC := commits.Committed()
		for x := uint64(0); x < min(c, readerC); x++ {
			seg, ok := commits.Lookup(x)
			r := decided[x]
			if !ok || seg.First != r.Range.First || seg.End != r.Range.End || seg.Hole != (r.Kind == sequencer.KindHole) ||
				(!seg.Hole && (seg.Ledger != r.Ledger || seg.Entry != r.Entry)) {
				t.Fatalf("%s: offset %d: reader has %+v (%v), the log %v", when, x, seg, ok, r)
			}
		}
	}
	check("fresh")
	tc.RevokeLeader()
	tc.ProduceAfterFailover(100)
	check("after failover")
	// A reader that stays keeps loading newer checkpoints once its window
	// is full: what it holds does not grow with what it has followed.
	tc.Produce(300)
	check("after 300 more batches")
	deadline := time.Now().Add(10 * time.Second)
	for {
		window, cached := commits.Resident()
		if window <= 8+2*30 && cached <= 2*4 { // the window, plus what came since the last checkpoint
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("resident: %d window, %d cached segments", window, cached)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
