package ledger

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"orderlog/proto/walpb"
)

// pausableWAL is a store's gRPC service that, while paused, answers
// nothing: every call waits until its caller gives up, as with a paused
// node whose connections stay open.
type pausableWAL struct {
	walpb.WALServer
	paused  *atomic.Bool
	waiting *atomic.Int64 // calls waiting on the pause now
}

func (s pausableWAL) hold(ctx context.Context) bool {
	if !s.paused.Load() {
		return false
	}
	s.waiting.Add(1)
	defer s.waiting.Add(-1)
	<-ctx.Done()
	return true
}

func (s pausableWAL) AddEntries(stream grpc.BidiStreamingServer[walpb.AddEntriesRequest, walpb.AddEntriesResponse]) error {
	if s.hold(stream.Context()) {
		return stream.Context().Err()
	}
	return s.WALServer.AddEntries(stream)
}

func (s pausableWAL) ReadEntry(ctx context.Context, req *walpb.ReadEntryRequest) (*walpb.ReadEntryResponse, error) {
	if s.hold(ctx) {
		return nil, ctx.Err()
	}
	return s.WALServer.ReadEntry(ctx, req)
}

func (s pausableWAL) ReadEntries(req *walpb.ReadEntriesRequest, stream grpc.ServerStreamingServer[walpb.ReadEntryResponse]) error {
	if s.hold(stream.Context()) {
		return stream.Context().Err()
	}
	return s.WALServer.ReadEntries(req, stream)
}

func (s pausableWAL) Fence(ctx context.Context, req *walpb.FenceRequest) (*walpb.FenceResponse, error) {
	if s.hold(ctx) {
		return nil, ctx.Err()
	}
	return s.WALServer.Fence(ctx, req)
}

func (s pausableWAL) CloseLedger(ctx context.Context, req *walpb.CloseLedgerRequest) (*walpb.CloseLedgerResponse, error) {
	if s.hold(ctx) {
		return nil, ctx.Err()
	}
	return s.WALServer.CloseLedger(ctx, req)
}

func (s pausableWAL) LastEntry(ctx context.Context, req *walpb.LastEntryRequest) (*walpb.LastEntryResponse, error) {
	if s.hold(ctx) {
		return nil, ctx.Err()
	}
	return s.WALServer.LastEntry(ctx, req)
}

type pausableBackend struct {
	storeBackend
	paused  *atomic.Bool
	waiting *atomic.Int64
}

func (b pausableBackend) server() walpb.WALServer {
	return pausableWAL{WALServer: b.storeBackend.server(), paused: b.paused, waiting: b.waiting}
}

// TestRecoveryDoesNotWaitForAPausedMember: with one member paused, a
// recovery fences, walks, rolls forward and closes on the other two
// without waiting for the paused one's calls to time out (here they
// would take 20 s each): it returns while they still wait.
//
// The paused member is the first of the ensemble (the one reads try
// first) or the last.
func TestRecoveryDoesNotWaitForAPausedMember(t *testing.T) {
	for _, slot := range []int{0, 2} {
		t.Run(fmt.Sprintf("slot_%d_paused", slot), func(t *testing.T) { recoverWithPausedMember(t, slot, true) })
	}
	// Every live member holds the last entry already: the copy to the
	// paused one is not waited for either.
	t.Run("live_members_hold_all", func(t *testing.T) { recoverWithPausedMember(t, 2, false) })
}

func recoverWithPausedMember(t *testing.T, pausedSlot int, slot1Lags bool) {
	c := &testCluster{cli: startEtcd(t), epoch: 3, writer: "ingest-1"}
	setEpochAndWriter(t, c.cli, c.epoch, c.writer)
	open := testBackend(t)
	var paused atomic.Bool
	var waiting atomic.Int64
	for i := range 3 {
		c.slots = append(c.slots, newSlot(t, fmt.Sprintf("slot-%d", i), func(t testing.TB, dir string) storeBackend {
			b := open(t, dir)
			if i == pausedSlot {
				return pausableBackend{storeBackend: b, paused: &paused, waiting: &waiting}
			}
			return b
		}))
	}
	c.net = newFaultNet(43, c.slots)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	w := c.create(t, 2, 1, WriterOptions{UnreachableAfter: time.Hour})
	appendRange(t, w, 0, 300)
	if err := w.WaitConfirmed(ctx, 299); err != nil {
		t.Fatal(err)
	}
	// Entries 300..599 reach slots 0 and 2 only: confirmed, and slot 1
	// lacks them, so the recovery rolls the last forward to it (and reads
	// the offsets' spans, trying the paused member last).
	c.net.partition("writer", c.slots[1].name, slot1Lags)
	appendRange(t, w, 300, 600)
	if err := w.WaitConfirmed(ctx, 599); err != nil {
		t.Fatal(err)
	}
	paused.Store(true)

	start := time.Now()
	m, err := Recover(ctx, c.cli, w.ID(), RecoverOptions{Stores: c.net.dialer("recovery"), CallTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if m.LastEntry != 599 {
		t.Fatalf("recovered last %d, want 599 (every confirmed entry)", m.LastEntry)
	}
	if waiting.Load() == 0 {
		t.Fatalf("no call waits on the paused member: the test did not pause it")
	}
	t.Logf("recovered in %v with the paused member's calls still waiting", time.Since(start).Round(time.Millisecond))
	checkClosedLedger(t, ctx, c, m)
}
