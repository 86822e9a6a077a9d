package rereplicate

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"orderlog/ingest/ledger"
	"orderlog/internal/event"
	"orderlog/sequencer"
)

// recorded collects LedgerRereplicated events.
type recorded struct {
	mu    sync.Mutex
	infos []event.RereplicationInfo
}

func (r *recorded) listener() event.Listener {
	return event.Listener{LedgerRereplicated: func(i event.RereplicationInfo) {
		r.mu.Lock()
		r.infos = append(r.infos, i)
		r.mu.Unlock()
	}}
}

func (r *recorded) forLedger(id uint64) []event.RereplicationInfo {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []event.RereplicationInfo
	for _, i := range r.infos {
		if i.Ledger == id {
			out = append(out, i)
		}
	}
	return out
}

// TestWipedStoreIsReplacedByACopy: a closed ledger on stores 0, 1, 2 whose
// store 2 lost its disk (it is registered again, as a new incarnation) is
// copied onto a store that lacks it and its ensemble swapped by
// compare-and-swap; every
// member of the new ensemble serves every entry byte-identical. The wiped
// store (new store id and incarnation on the same address) is never
// counted as the copy it lost, although the grace is an hour. An
// open ledger on the same stores is left alone. Before, nothing ever
// changed an ensemble.
func TestWipedStoreIsReplacedByACopy(t *testing.T) {
	c := newTestCluster(t, 4)
	ctx := context.Background()
	m := c.writeClosed(t, c.members(0, 1, 2), 800)
	open, err := ledger.Create(ctx, c.cli, ledger.CreateOptions{Epoch: testEpoch, WriterIncarnation: "ingest-1",
		Ensemble: c.members(0, 1, 2), AckQuorum: 2, Tolerate: 1, Stores: c.dialer})
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close(ctx)
	wiped := c.stores[2].member
	c.wipe(t, c.stores[2])
	var events recorded
	c.runWorker(t, time.Hour, &events)

	// The copy goes to a registered store that lacks the ledger: store 3,
	// or the wiped store's new incarnation (equally loaded).
	after := c.waitEnsemble(t, m.ID, func(m ledger.Metadata) bool { return !slices.Contains(m.Ensemble, wiped) }, nil)
	added := after.Ensemble[2]
	if added != c.stores[3].member && added != c.stores[2].member {
		t.Fatalf("copied onto %+v", added)
	}
	if want := []ledger.Member{c.stores[0].member, c.stores[1].member, added}; !slices.Equal(after.Ensemble, want) {
		t.Fatalf("ensemble %+v", after.Ensemble)
	}
	if after.LastEntry != m.LastEntry || after.W != 3 || after.IntendedW != 3 || after.FirstOffset != m.FirstOffset {
		t.Fatalf("after re-replication: %+v, before %+v", after, m)
	}
	c.checkEveryMember(t, after, func(e int64) []byte { return payloadFor(m.ID, e) })
	r, err := ledger.OpenReader(ctx, c.cli, m.ID, ledger.ReaderOptions{Stores: c.dialer})
	if err != nil || r.Metadata().Ensemble[2] != added {
		t.Fatalf("a reader opened now uses %+v, %v", r.Metadata().Ensemble, err)
	}
	if got := events.forLedger(m.ID); len(got) != 1 || fmt.Sprint(got[0].Lost, got[0].Added) != fmt.Sprint([]string{wiped.StoreID}, []string{added.StoreID}) {
		t.Fatalf("events %+v", got)
	}
	if now, err := ledger.Get(ctx, c.cli, open.ID()); err != nil || now.ModRevision != open.Metadata().ModRevision {
		t.Fatalf("the open ledger changed: %+v, %v", now, err)
	}
}

// TestAStoreThatComesBackWakesTheWorker: passes run when stores register
// or go, not only every Interval (an hour here), so a ledger that lost a
// copy is copied again within moments of the store's return.
func TestAStoreThatComesBackWakesTheWorker(t *testing.T) {
	c := newTestCluster(t, 4)
	m := c.writeClosed(t, c.members(0, 1, 2), 50)
	first := c.stores[2].member
	c.wipe(t, c.stores[2])
	var events recorded
	c.runWorkerEvery(t, time.Hour, time.Hour, &events)
	c.waitEnsemble(t, m.ID, func(m ledger.Metadata) bool { return !slices.Contains(m.Ensemble, first) }, nil)

	// The worker has passed once and now waits out its hour: the second
	// wipe is copied only if the store's return wakes it.
	second := c.stores[0].member
	c.wipe(t, c.stores[0])
	after := c.waitEnsemble(t, m.ID, func(m ledger.Metadata) bool { return !slices.Contains(m.Ensemble, second) }, nil)
	c.checkEveryMember(t, after, func(e int64) []byte { return payloadFor(m.ID, e) })
}

// TestCommitLedgerIsRereplicated: a closed commit ledger of the sequencer,
// created degraded on two stores (a third was down), keeps W=2 of an
// intended 3 until the worker copies it; after one of its stores is gone
// longer than the grace period it is copied onto the two live stores that
// lack it. A new leader's replay (ReadCommitLog) reads the same records
// from the new ensemble.
func TestCommitLedgerIsRereplicated(t *testing.T) {
	c := newTestCluster(t, 4)
	ctx := context.Background()
	if _, err := c.cli.Put(ctx, "test/election-key", "leader"); err != nil {
		t.Fatal(err)
	}
	control := &sequencer.LedgerClient{Etcd: c.cli, Stores: c.dialer, Writer: "sequencer-test",
		Replication: sequencer.CommitReplication{W: 3, AckQuorum: 2, Tolerate: 1,
			Choose: func(context.Context) ([]ledger.Member, error) { return c.members(0, 1), nil }}}
	var confirmed sync.WaitGroup
	const n = 200
	confirmed.Add(1)
	commit, err := control.CreateCommitLog(ctx, testEpoch, "test/election-key", func(lac int64) {
		if lac == n-1 {
			confirmed.Done()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	record := func(i int) []byte { return []byte(fmt.Sprintf("commit record %d", i)) }
	for i := range n {
		if _, err := commit.Append(record(i)); err != nil {
			t.Fatal(err)
		}
	}
	confirmed.Wait()
	if err := commit.Close(ctx); err != nil {
		t.Fatal(err)
	}
	m, err := ledger.Get(ctx, c.cli, commit.ID())
	if err != nil || !m.Degraded() || m.W != 2 {
		t.Fatalf("commit ledger %+v, %v", m, err)
	}
	c.stop(c.stores[1])
	var events recorded
	c.runWorker(t, time.Minute, &events)
	lost := c.stores[1].member
	// The fake clock moves a minute per poll: store 1 counts as lost one
	// grace period after the first pass that saw it gone.
	after := c.waitEnsemble(t, m.ID, func(m ledger.Metadata) bool {
		return m.W == 3 && !m.Degraded() && !slices.Contains(m.Ensemble, lost)
	}, func() { c.advance(time.Minute) })
	if after.Version != ledger.MetadataVersion || after.Ensemble[0] != c.stores[0].member {
		t.Fatalf("ensemble %+v (version %d)", after.Ensemble, after.Version)
	}
	c.checkEveryMember(t, after, func(e int64) []byte { return record(int(e)) })
	replay, err := control.ReadCommitLog(ctx, m.ID)
	if err != nil || len(replay) != n || string(replay[n-1]) != string(record(n-1)) {
		t.Fatalf("replay read %d records: %v", len(replay), err)
	}
}
