package ledger

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	events "orderlog/internal/event"
	"orderlog/proto/walpb"

	"google.golang.org/grpc"
)

// TestRecoveryUnknownIsNotAbsent: entries 20..29 are confirmed on slots 1
// and 2 only; slot 1 then loses its disk (UNKNOWN) and the recoverer cannot
// fence or read slot 2 (its appends still pass). For entry 20, slot 0's
// ABSENT plus slot 1's UNKNOWN would end the ledger at 19 if UNKNOWN
// counted as ABSENT, losing ten confirmed entries; recovery must wait
// instead, and finish with every confirmed entry once slot 2 answers.
func TestRecoveryUnknownIsNotAbsent(t *testing.T) {
	c := newTestCluster(t, 3, 5)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w := c.create(t, 2, 1, WriterOptions{UnreachableAfter: time.Hour})
	appendRange(t, w, 0, 20)
	if err := w.WaitConfirmed(ctx, 19); err != nil {
		t.Fatal(err)
	}
	c.net.partition("writer", c.slots[0].name, true)
	appendRange(t, w, 20, 30)
	if err := w.WaitConfirmed(ctx, 29); err != nil {
		t.Fatal(err)
	}
	c.slots[1].restart(t, true)
	c.net.cutReads("recovery", c.slots[2].name, true)

	// The recovery must keep asking about entry 20 rather than conclude.
	err := recoverUntilAsked(t, ctx, c, w.ID(), c.slots[0].member(), 20, walpb.EntryStatus_ABSENT, RecoverOptions{})
	var incomplete *RecoveryIncompleteError
	if !errors.As(err, &incomplete) || incomplete.Entry != 20 {
		t.Fatalf("Recover without slot 2's answers = %v, want incomplete at entry 20", err)
	}
	if m, err := Get(ctx, c.cli, w.ID()); err != nil || m.State != StateRecovering {
		t.Fatalf("ledger after incomplete recovery: %+v, %v", m, err)
	}

	c.net.cutReads("recovery", c.slots[2].name, false)
	m, err := Recover(ctx, c.cli, w.ID(), RecoverOptions{Stores: c.net.dialer("recovery")})
	if err != nil {
		t.Fatal(err)
	}
	if m.LastEntry != 29 {
		t.Fatalf("recovered last %d, want 29 (all confirmed, nothing more was written)", m.LastEntry)
	}
	checkClosedLedger(t, ctx, c, m)
	if closed, err := w.Close(ctx); err != nil || closed.LastEntry != 29 {
		t.Fatalf("writer close = %+v, %v", closed, err)
	}
}

// recoverUntilAsked runs a recovery of the ledger until the store has given
// the answer for the entry five times (the recovery asked again and again
// instead of concluding), stops it, and returns its error. Waiting for
// answers, not for a fixed time, keeps the test from depending on how fast
// a loaded machine fences and settles the entries before.
func recoverUntilAsked(t *testing.T, ctx context.Context, c *testCluster, ledgerID uint64, store Member, entry int64, answer walpb.EntryStatus, o RecoverOptions) error {
	t.Helper()
	o.Stores = c.net.dialer("recovery")
	stop, cancelStop := context.WithCancel(ctx)
	defer cancelStop()
	done := make(chan error, 1)
	go func() {
		_, err := Recover(stop, c.cli, ledgerID, o)
		done <- err
	}()
	const askedAgain = 5
	for c.net.answersFor(store, ledgerID, entry, answer) < askedAgain {
		select {
		case err := <-done:
			t.Fatalf("Recover ended (%v); want it still asking about entry %d", err, entry)
		case <-ctx.Done():
			t.Fatalf("store %s answered %v for entry %d only %d times", store.Address, answer, entry, c.net.answersFor(store, ledgerID, entry, answer))
		case <-time.After(5 * time.Millisecond):
		}
	}
	cancelStop()
	err := <-done
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Recover stopped with %v, want it canceled while waiting", err)
	}
	return err
}

// TestRecoveryWaitsWhenAHoldersImpossible: with W = A = 3 and one store's
// disk lost, an unconfirmed entry cannot be rolled forward to A stores
// (ensembles never change), so recovery does not conclude and the ledger
// stays recovering.
func TestRecoveryWaitsWhenAHoldersImpossible(t *testing.T) {
	c := newTestCluster(t, 3, 9)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w := c.create(t, 3, 1, WriterOptions{})
	appendRange(t, w, 0, 10)
	if err := w.WaitConfirmed(ctx, 9); err != nil {
		t.Fatal(err)
	}
	c.net.partition("writer", c.slots[2].name, true)
	appendRange(t, w, 10, 12) // held by slots 0 and 1, never confirmed
	c.slots[2].restart(t, true)

	// The recovery must keep asking about entry 10 rather than conclude.
	err := recoverUntilAsked(t, ctx, c, w.ID(), c.slots[0].member(), 10, walpb.EntryStatus_PRESENT, RecoverOptions{CallTimeout: time.Second})
	var incomplete *RecoveryIncompleteError
	if !errors.As(err, &incomplete) || incomplete.Entry != 10 {
		t.Fatalf("Recover = %v, want incomplete at entry 10", err)
	}
	if m, err := Get(ctx, c.cli, w.ID()); err != nil || m.State != StateRecovering {
		t.Fatalf("ledger: %+v, %v", m, err)
	}
	if lac := w.LAC(); lac != 9 {
		t.Fatalf("writer LAC %d, want 9", lac)
	}

	// A recovery waiting there stops and adopts the result when someone
	// else closes the ledger (here: an operator's close, written directly).
	done := make(chan Metadata, 1)
	go func() {
		m, err := Recover(ctx, c.cli, w.ID(), RecoverOptions{Stores: c.net.dialer("recovery"), CallTimeout: 100 * time.Millisecond})
		if err != nil {
			t.Error(err)
		}
		done <- m
	}()
	cur, err := Get(ctx, c.cli, w.ID())
	if err != nil {
		t.Fatal(err)
	}
	if _, swapped, err := transition(ctx, c.cli, cur, StateRecovering, func(m Metadata) Metadata {
		m.State, m.LastEntry = StateClosed, 9
		return m
	}); err != nil || !swapped {
		t.Fatalf("close: %v %v", swapped, err)
	}
	if m := <-done; m.State != StateClosed || m.LastEntry != 9 {
		t.Fatalf("waiting recovery returned %+v", m)
	}
}

// TestFencedWriterGetsNoNewConfirmation: a recovery fences a live writer;
// its later appends fail with ErrFenced and its LAC stays at or below the
// recovered last entry, which holds everything it had confirmed. The
// events tell the same story: the fence, the recovery's outcome, the
// writer's failure, and a second recovery that finds the ledger closed.
func TestFencedWriterGetsNoNewConfirmation(t *testing.T) {
	c := newTestCluster(t, 3, 13)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var reported []int64
	failures := make(chan events.WriterFailure, 1)
	w := c.create(t, 2, 1, WriterOptions{OnConfirm: func(lac int64) { reported = append(reported, lac) },
		Events: events.Listener{WriterFailed: func(f events.WriterFailure) { failures <- f }}})
	appendRange(t, w, 0, 50)
	if err := w.WaitConfirmed(ctx, 49); err != nil {
		t.Fatal(err)
	}
	var fences []events.FenceInfo
	var recoveries []events.RecoveryInfo
	listener := events.Listener{
		LedgerFenced:    func(f events.FenceInfo) { fences = append(fences, f) },
		LedgerRecovered: func(r events.RecoveryInfo) { recoveries = append(recoveries, r) },
	}
	m, err := Recover(ctx, c.cli, w.ID(), RecoverOptions{Stores: c.net.dialer("recovery"), Events: listener})
	if err != nil {
		t.Fatal(err)
	}
	if m.LastEntry != 49 {
		t.Fatalf("recovered last %d, want 49", m.LastEntry)
	}
	if len(fences) != 1 || fences[0].Ledger != w.ID() || len(fences[0].Stores) < 2 {
		t.Fatalf("fence events %+v, want one for ledger %d on at least W-A+1 = 2 stores", fences, w.ID())
	}
	if len(recoveries) != 1 || recoveries[0].Outcome != events.RecoveryClosed || recoveries[0].Last != 49 ||
		recoveries[0].Ledger != w.ID() || recoveries[0].Writer != c.writer || recoveries[0].Epoch != uint64(c.epoch) {
		t.Fatalf("recovery events %+v, want one closed at 49", recoveries)
	}
	var appendErr error
	for i := int64(50); i < 5000 && appendErr == nil; i++ {
		_, appendErr = w.Append(payloadFor(w.ID(), i), spanFor(i))
	}
	if err := w.WaitConfirmed(ctx, 50); !errors.Is(err, ErrFenced) {
		t.Fatalf("WaitConfirmed after the fence: %v (append: %v), want ErrFenced", err, appendErr)
	}
	if f := <-failures; !errors.Is(f.Err, ErrFenced) || f.Ledger != w.ID() || f.LAC > 49 {
		t.Fatalf("writer failure event %+v, want ErrFenced at LAC ≤ 49", f)
	}
	if _, err := Recover(ctx, c.cli, w.ID(), RecoverOptions{Stores: c.net.dialer("recovery"), Events: listener}); err != nil {
		t.Fatal(err)
	}
	if len(recoveries) != 2 || recoveries[1].Outcome != events.RecoveryAlreadyClosed || len(fences) != 1 {
		t.Fatalf("second recovery events %+v (fences %d), want already_closed and no new fence", recoveries, len(fences))
	}
	closed, err := w.Close(ctx)
	if err != nil || closed.LastEntry != 49 || closed.ModRevision != m.ModRevision {
		t.Fatalf("writer Close = %+v, %v; recovered %+v", closed, err, m)
	}
	for _, lac := range reported {
		if lac > 49 {
			t.Fatalf("fenced writer reported LAC %d", lac)
		}
	}
	checkClosedLedger(t, ctx, c, closed)
}

// TestRecoveryRollsForwardManyEntries: the writer reached only one store
// for 2,000 entries; recovery rolls every one forward to a second store
// (in windows, one stream per store) and the closed ledger holds them all.
func TestRecoveryRollsForwardManyEntries(t *testing.T) {
	c := newTestCluster(t, 3, 17)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w := c.create(t, 2, 1, WriterOptions{UnreachableAfter: time.Hour, MaxInFlight: 4096})
	appendRange(t, w, 0, 100)
	if err := w.WaitConfirmed(ctx, 99); err != nil {
		t.Fatal(err)
	}
	c.net.partition("writer", c.slots[1].name, true)
	c.net.partition("writer", c.slots[2].name, true)
	const n = 2100
	appendRange(t, w, 100, n)
	cl, _ := c.slots[0].client()
	for { // wait until slot 0 holds every entry
		resp, err := cl.LastEntry(ctx, &walpb.LastEntryRequest{LedgerId: w.ID(), StoreIncarnation: w.Metadata().Ensemble[0].Incarnation})
		if err != nil {
			t.Fatal(err)
		}
		if resp.LastEntry == n-1 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("slot 0 holds up to %d", resp.LastEntry)
		case <-time.After(5 * time.Millisecond):
		}
	}
	if lac := w.LAC(); lac != 99 {
		t.Fatalf("writer confirmed %d with one store", lac)
	}
	// Slot 2 out of the recovery's reach, its fence needs slot 0's: an
	// entry a fenced store holds is rolled forward (an entry only an
	// unfenced store holds may be cut off, as it was never confirmed).
	c.net.partition("recovery", c.slots[2].name, true)
	m, err := Recover(ctx, c.cli, w.ID(), RecoverOptions{Stores: c.net.dialer("recovery")})
	if err != nil {
		t.Fatal(err)
	}
	if m.LastEntry != n-1 {
		t.Fatalf("recovered last %d, want %d (held by one store, rolled forward)", m.LastEntry, n-1)
	}
	// Slot 0 alone must not be needed any more: A = 2 stores hold each entry.
	c.net.partition("checker", c.slots[0].name, true)
	checkClosedLedger(t, ctx, c, m)
}

// cutClient fails chosen calls to one store: the first fences, every read,
// every (best-effort) close.
type cutClient struct {
	walpb.WALClient
	fenceFailures        atomic.Int32 // first fences to fail
	failReads, failClose bool
}

func (c *cutClient) CloseLedger(ctx context.Context, in *walpb.CloseLedgerRequest, o ...grpc.CallOption) (*walpb.CloseLedgerResponse, error) {
	if c.failClose {
		return nil, errCut
	}
	return c.WALClient.CloseLedger(ctx, in, o...)
}

var errCut = errors.New("test: call cut")

func (c *cutClient) Fence(ctx context.Context, in *walpb.FenceRequest, o ...grpc.CallOption) (*walpb.FenceResponse, error) {
	if c.fenceFailures.Add(-1) >= 0 {
		return nil, errCut
	}
	return c.WALClient.Fence(ctx, in, o...)
}

func (c *cutClient) ReadEntry(ctx context.Context, in *walpb.ReadEntryRequest, o ...grpc.CallOption) (*walpb.ReadEntryResponse, error) {
	if c.failReads {
		return nil, errCut
	}
	return c.WALClient.ReadEntry(ctx, in, o...)
}

func (c *cutClient) ReadEntries(ctx context.Context, in *walpb.ReadEntriesRequest, o ...grpc.CallOption) (grpc.ServerStreamingClient[walpb.ReadEntryResponse], error) {
	if c.failReads {
		return nil, errCut
	}
	return c.WALClient.ReadEntries(ctx, in, o...)
}

// TestAbsentCountsOnlyFromFencedStores (W=3, A=2): entry 11 reached only
// store 1, which acked it; the writer's copy to store 2 is still on its way.
// The recovery's fence to store 2 fails at first (the quorum is met without
// it) and store 1 answers no reads. Store 0 and store 2 both say ABSENT for
// entry 11, but store 2 is not fenced: had its ABSENT counted, the ledger
// would close at 10 and store 2 (whose close message is lost) could then
// take entry 11, confirming it to the writer after the ledger ended
// without it.
func TestAbsentCountsOnlyFromFencedStores(t *testing.T) {
	c := newTestCluster(t, 3, 11)
	ctx := context.Background()
	w := c.create(t, 2, 1, WriterOptions{UnreachableAfter: time.Minute})
	for i := range int64(11) {
		if _, err := w.Append(payloadFor(w.ID(), i), spanFor(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.WaitConfirmed(ctx, 10); err != nil {
		t.Fatal(err)
	}
	c.net.partition("writer", c.slots[0].name, true)
	c.net.partition("writer", c.slots[2].name, true)
	if _, err := w.Append(payloadFor(w.ID(), 11), spanFor(11)); err != nil {
		t.Fatal(err)
	}
	held := w.Metadata().Ensemble[1]
	for { // wait until store 1 holds entry 11
		cl, _ := c.slots[1].client()
		r, err := cl.ReadEntry(ctx, &walpb.ReadEntryRequest{LedgerId: w.ID(), StoreIncarnation: held.Incarnation, EntryId: 11})
		if err == nil && r.Status == walpb.EntryStatus_PRESENT {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	base := c.net.dialer("recovery")
	dialer := DialerFunc(func(m Member) (walpb.WALClient, error) {
		cl, err := base.Client(m)
		if err != nil {
			return nil, err
		}
		cut := &cutClient{WALClient: cl, failReads: m.Address == c.slots[1].name}
		if m.Address == c.slots[2].name { // its close after the recovery is lost too
			cut.fenceFailures.Store(1)
			cut.failClose = true
		}
		return cut, nil
	})
	rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	final, err := Recover(rctx, c.cli, w.ID(), RecoverOptions{Stores: dialer})
	if err != nil {
		t.Fatal(err)
	}
	c.net.partition("writer", c.slots[2].name, false)
	wctx, wcancel := context.WithTimeout(ctx, 2*time.Second)
	defer wcancel()
	if err := w.WaitConfirmed(wctx, 11); err == nil && final.LastEntry < 11 {
		t.Fatalf("entry 11 confirmed to the writer (LAC %d), the recovered ledger ends at %d", w.LAC(), final.LastEntry)
	}
}

// TestRecoverWithoutOffsetsSkipsTheHull: a ledger whose entries carry no
// offsets (a commit ledger) is closed with none, at the same last entry.
func TestRecoverWithoutOffsetsSkipsTheHull(t *testing.T) {
	c := newTestCluster(t, 1, 1)
	ctx := context.Background()
	w := c.create(t, 1, 0, WriterOptions{})
	appendRange(t, w, 0, 10)
	if err := w.WaitConfirmed(ctx, 9); err != nil {
		t.Fatal(err)
	}
	m, err := Recover(ctx, c.cli, w.ID(), RecoverOptions{Stores: c.net.dialer("recovery"), NoOffsets: true})
	if err != nil || m.LastEntry != 9 || m.HasOffsets() {
		t.Fatalf("recovered %+v, %v: want last entry 9 and no offsets", m, err)
	}
}
