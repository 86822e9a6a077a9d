package retention

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"orderlog/ingest/ledger"
	"orderlog/ingest/wal"
	"orderlog/internal/etcdtest"
	"orderlog/internal/keys"
	"orderlog/proto/walpb"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testWorld is real embedded etcd and three real WAL stores, reached in
// process; a store can be made unreachable.
type testWorld struct {
	cli    *clientv3.Client
	stores []*wal.Store
	mu     sync.Mutex
	down   map[string]bool // by store id
}

func newTestWorld(t *testing.T) *testWorld {
	t.Helper()
	w := &testWorld{cli: etcdtest.Client(t), down: map[string]bool{}}
	if _, err := w.cli.Put(context.Background(), keys.SeqEpoch, "1"); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		s, err := wal.Open(wal.Config{Dir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		w.stores = append(w.stores, s)
	}
	return w
}

func (w *testWorld) Client(m ledger.Member) (walpb.WALClient, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.down[m.StoreID] {
		return nil, errors.New("store unreachable")
	}
	for _, s := range w.stores {
		if s.StoreID() == m.StoreID {
			return wal.NewLocalClient(wal.NewService(s)), nil
		}
	}
	return nil, fmt.Errorf("no store %s", m.StoreID)
}

func (w *testWorld) setDown(s *wal.Store, down bool) {
	w.mu.Lock()
	w.down[s.StoreID()] = down
	w.mu.Unlock()
}

func (w *testWorld) ensemble() []ledger.Member {
	var out []ledger.Member
	for _, s := range w.stores {
		out = append(out, ledger.Member{StoreID: s.StoreID(), Incarnation: s.Incarnation(), Address: s.StoreID()})
	}
	return out
}

// writeLedger writes a closed ledger of writer: a snapshot-like entry 0,
// then one entry per span.
func (w *testWorld) writeLedger(t *testing.T, writer string, spans ...ledger.Span) ledger.Metadata {
	t.Helper()
	ctx := context.Background()
	if _, err := w.cli.Put(ctx, keys.Ingest(writer), "alive"); err != nil {
		t.Fatal(err)
	}
	lw, err := ledger.Create(ctx, w.cli, ledger.CreateOptions{Epoch: 1, WriterIncarnation: writer, Ensemble: w.ensemble(),
		W: 3, AckQuorum: 2, Tolerate: 1, Stores: w})
	if err != nil {
		t.Fatal(err)
	}
	last := int64(-1)
	for i, span := range append([]ledger.Span{{}}, spans...) {
		if last, err = lw.Append(fmt.Appendf(nil, "%s entry %d", writer, i), span); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, func() bool { return lw.LAC() == last })
	m, err := lw.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
	}
}

func (w *testWorld) worker(t *testing.T, p Policy, committed uint64, now time.Time) *Worker {
	t.Helper()
	worker, err := New(Config{Etcd: w.cli, Stores: w, Name: "test", Policy: p, DeleteGrace: -1,
		Committed: func() (uint64, bool) { return committed, true }, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	return worker
}

// held reports which stores still hold any record of ledger id.
func (w *testWorld) held(id uint64) []bool {
	var out []bool
	for _, s := range w.stores {
		out = append(out, s.Read(id, 0).Status == wal.Present)
	}
	return out
}

func exists(t *testing.T, cli *clientv3.Client, key string) bool {
	t.Helper()
	resp, err := cli.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return len(resp.Kvs) > 0
}

// TestPassMovesTheStartAndDeletesWhatLiesBelowIt: with a byte limit that
// keeps the newest ledger, a pass moves the log start to the older
// ledgers' end, removes their copies from every store and their records
// from etcd, and leaves the newest ledger and the sequencer's commit
// ledger (no offsets) alone.
func TestPassMovesTheStartAndDeletesWhatLiesBelowIt(t *testing.T) {
	w := newTestWorld(t)
	l1 := w.writeLedger(t, "a", ledger.Span{First: 0, End: 10}, ledger.Span{First: 10, End: 20})
	l2 := w.writeLedger(t, "b", ledger.Span{First: 20, End: 40})
	commit := w.writeLedger(t, "sequencer-n1")
	l3 := w.writeLedger(t, "a", ledger.Span{First: 40, End: 60})
	worker := w.worker(t, Policy{Bytes: l3.Bytes}, 60, time.Now())
	if err := worker.Pass(context.Background()); err != nil {
		t.Fatal(err)
	}
	start, _, err := ReadStart(context.Background(), w.cli)
	if err != nil || start != 40 {
		t.Fatalf("log start %d, %v; want 40", start, err)
	}
	for _, gone := range []ledger.Metadata{l1, l2} {
		if exists(t, w.cli, keys.Ledger(gone.ID)) || exists(t, w.cli, keys.LedgerDeleting(gone.ID)) {
			t.Fatalf("ledger %d's record or mark is left", gone.ID)
		}
		if held := w.held(gone.ID); held[0] || held[1] || held[2] {
			t.Fatalf("ledger %d still held: %v", gone.ID, held)
		}
	}
	for _, kept := range []ledger.Metadata{commit, l3} {
		if !exists(t, w.cli, keys.Ledger(kept.ID)) || !w.held(kept.ID)[0] {
			t.Fatalf("ledger %d deleted", kept.ID)
		}
	}
}

// TestADeletionFinishesAfterAStoreComesBack: a store down during the
// delete keeps the record and the mark (nothing forgets its copy); the
// next pass, once it answers again, finishes. A new worker (a crash after
// the mark) finishes a predecessor's deletion too.
func TestADeletionFinishesAfterAStoreComesBack(t *testing.T) {
	w := newTestWorld(t)
	l1 := w.writeLedger(t, "a", ledger.Span{First: 0, End: 10})
	w.writeLedger(t, "a", ledger.Span{First: 10, End: 20})
	w.setDown(w.stores[2], true)
	now := time.Now().Add(time.Hour)
	if err := w.worker(t, Policy{Age: time.Minute}, 20, now).Pass(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !exists(t, w.cli, keys.Ledger(l1.ID)) || !exists(t, w.cli, keys.LedgerDeleting(l1.ID)) {
		t.Fatal("the record or the mark went while a member could not delete its copy")
	}
	if held := w.held(l1.ID); held[0] || held[1] || !held[2] {
		t.Fatalf("held %v: the reachable members delete, the one down keeps its copy", held)
	}
	w.setDown(w.stores[2], false)
	if err := w.worker(t, Policy{}, 20, now).Pass(context.Background()); err != nil { // a successor that keeps everything
		t.Fatal(err)
	}
	if exists(t, w.cli, keys.Ledger(l1.ID)) || exists(t, w.cli, keys.LedgerDeleting(l1.ID)) || w.held(l1.ID)[2] {
		t.Fatal("the marked deletion was not finished")
	}
}

// TestAProducersRebuildKeepsItsLedgers: a ledger a producer record's
// rebuild reads stays while the owner lives, below the start or not; once
// the owner is gone and the expiry passed, the producer is expired and the
// ledger goes.
func TestAProducersRebuildKeepsItsLedgers(t *testing.T) {
	w := newTestWorld(t)
	ctx := context.Background()
	l1 := w.writeLedger(t, "a", ledger.Span{First: 0, End: 10})
	w.writeLedger(t, "b", ledger.Span{First: 10, End: 20})
	record := fmt.Sprintf(`{"version":1,"id":9,"name":"p","epoch":2,"owner":"a","gen":1,"state_ledger":%d}`, l1.ID)
	if _, err := w.cli.Put(ctx, keys.Producer(9), record); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(8 * 24 * time.Hour)
	worker, err := New(Config{Etcd: w.cli, Stores: w, Name: "test", Policy: Policy{Age: time.Minute}, ProducerExpiry: 7 * 24 * time.Hour, DeleteGrace: -1,
		Committed: func() (uint64, bool) { return 20, true }, Now: func() time.Time { return later }})
	if err != nil {
		t.Fatal(err)
	}
	if err := worker.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	if start, _, _ := ReadStart(ctx, w.cli); start != 20 || !exists(t, w.cli, keys.Ledger(l1.ID)) {
		t.Fatalf("start %d; the pinned ledger must stay while its producer's owner lives", start)
	}
	if _, err := w.cli.Delete(ctx, keys.Ingest("a")); err != nil {
		t.Fatal(err)
	}
	if err := worker.Pass(ctx); err != nil { // expires the orphan
		t.Fatal(err)
	}
	if err := worker.Pass(ctx); err != nil { // deletes what it pinned
		t.Fatal(err)
	}
	resp, err := w.cli.Get(ctx, keys.Producer(9))
	if err != nil {
		t.Fatal(err)
	}
	var rec producerFields
	if err := jsonUnmarshal(resp.Kvs[0].Value, &rec); err != nil || !rec.Expired || rec.StateLedger != 0 {
		t.Fatalf("producer record %s, %v", resp.Kvs[0].Value, err)
	}
	if exists(t, w.cli, keys.Ledger(l1.ID)) {
		t.Fatal("the expired producer's ledger is still there")
	}
}

// TestTheStartNeverPassesCOrMovesBack: C bounds the start, and an older
// plan never lowers it.
func TestTheStartNeverPassesCOrMovesBack(t *testing.T) {
	w := newTestWorld(t)
	ctx := context.Background()
	w.writeLedger(t, "a", ledger.Span{First: 0, End: 10})
	w.writeLedger(t, "a", ledger.Span{First: 10, End: 30})
	now := time.Now().Add(time.Hour)
	if err := w.worker(t, Policy{Age: time.Minute}, 25, now).Pass(ctx); err != nil {
		t.Fatal(err)
	}
	if start, _, _ := ReadStart(ctx, w.cli); start != 25 {
		t.Fatalf("start %d, want C = 25", start)
	}
	if err := w.worker(t, Policy{Age: time.Minute}, 5, now).Pass(ctx); err != nil {
		t.Fatal(err)
	}
	if start, _, _ := ReadStart(ctx, w.cli); start != 25 {
		t.Fatalf("start %d moved back", start)
	}
}

func jsonUnmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }

// TestDeletionWaitsForTheStartToStand: ledgers below a new start are kept
// until that start stood for the grace (readers learn it by a watch), and
// a ledger closed within the grace is kept too.
func TestDeletionWaitsForTheStartToStand(t *testing.T) {
	w := newTestWorld(t)
	ctx := context.Background()
	l1 := w.writeLedger(t, "a", ledger.Span{First: 0, End: 10})
	w.writeLedger(t, "a", ledger.Span{First: 10, End: 20})
	now := time.Now()
	worker, err := New(Config{Etcd: w.cli, Stores: w, Name: "test", Policy: Policy{Bytes: 1}, DeleteGrace: time.Minute,
		Committed: func() (uint64, bool) { return 20, true }, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	if err := worker.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	if start, _, _ := ReadStart(ctx, w.cli); start != 20 || !exists(t, w.cli, keys.Ledger(l1.ID)) {
		t.Fatalf("start %d; ledger %d must stay while the start is new", start, l1.ID)
	}
	now = now.Add(30 * time.Second)
	if err := worker.Pass(ctx); err != nil || !exists(t, w.cli, keys.Ledger(l1.ID)) {
		t.Fatalf("deleted within the grace (%v)", err)
	}
	now = now.Add(31 * time.Second)
	if err := worker.Pass(ctx); err != nil || exists(t, w.cli, keys.Ledger(l1.ID)) {
		t.Fatalf("not deleted once the start stood a minute (%v)", err)
	}
}

// TestAMarkIsTakenBackWhenAStateNamesTheLedger: a producer's state
// recorded between the pass's read of the pins and its marks makes the
// pass take the mark back before any copy is deleted.
func TestAMarkIsTakenBackWhenAStateNamesTheLedger(t *testing.T) {
	w := newTestWorld(t)
	ctx := context.Background()
	l1 := w.writeLedger(t, "a", ledger.Span{First: 0, End: 10})
	worker := w.worker(t, Policy{}, 10, time.Now())
	state, err := readState(ctx, w.cli)
	if err != nil {
		t.Fatal(err)
	}
	if err := mark(ctx, w.cli, state.ledgers[0], ""); err != nil {
		t.Fatal(err)
	}
	record := fmt.Sprintf(`{"version":1,"id":4,"name":"p","epoch":1,"owner":"a","gen":1,"state_ledger":%d}`, l1.ID)
	if _, err := w.cli.Put(ctx, keys.Producer(4), record); err != nil { // recorded just before the mark
		t.Fatal(err)
	}
	state.deleting[l1.ID] = true
	if err := worker.unmarkPinned(ctx, state, map[uint64]bool{l1.ID: true}); err != nil {
		t.Fatal(err)
	}
	if exists(t, w.cli, keys.LedgerDeleting(l1.ID)) || state.deleting[l1.ID] {
		t.Fatal("the mark of a ledger a producer's state names was kept")
	}
	worker.deleteMarked(ctx, state)
	if !w.held(l1.ID)[0] {
		t.Fatal("its copies were deleted")
	}
}

// TestAMarkWhoseLedgerIsGoneGoes: a mark left on a ledger someone else
// deleted (the sequencer deletes its own checkpoint ledgers) is removed by
// the next pass instead of staying for ever (found by the crash test).
func TestAMarkWhoseLedgerIsGoneGoes(t *testing.T) {
	w := newTestWorld(t)
	ctx := context.Background()
	if _, err := w.cli.Put(ctx, keys.LedgerDeleting(77), ""); err != nil {
		t.Fatal(err)
	}
	if err := w.worker(t, Policy{}, 0, time.Now()).Pass(ctx); err != nil {
		t.Fatal(err)
	}
	if exists(t, w.cli, keys.LedgerDeleting(77)) {
		t.Fatal("the stray mark stayed")
	}
}
