package sequencer

import (
	"context"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"orderlog/ingest/ledger"
	"orderlog/ingest/wal"
)

// wipeableStores are WAL stores on loopback gRPC that a test can restart
// empty on the same address, as a node whose disk was replaced does: the
// store comes back as a new incarnation.
type wipeableStores struct {
	t       *testing.T
	mu      sync.Mutex
	members []ledger.Member
	stops   []func()
}

func (s *wipeableStores) start(addr string) (ledger.Member, func()) {
	store, err := wal.Open(wal.Config{Dir: s.t.TempDir()})
	if err != nil {
		s.t.Fatal(err)
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		s.t.Fatal(err)
	}
	srv := wal.Serve(lis, store)
	var once sync.Once
	stop := func() { once.Do(func() { srv.Stop(); store.Close() }) }
	s.t.Cleanup(stop)
	return ledger.Member{StoreID: store.StoreID(), Incarnation: store.Incarnation(), Address: lis.Addr().String()}, stop
}

func (s *wipeableStores) add() {
	m, stop := s.start("127.0.0.1:0")
	s.mu.Lock()
	defer s.mu.Unlock()
	s.members, s.stops = append(s.members, m), append(s.stops, stop)
}

// wipe stops store i and starts an empty one on its address.
func (s *wipeableStores) wipe(i int) ledger.Member {
	s.mu.Lock()
	addr, stop := s.members[i].Address, s.stops[i]
	s.mu.Unlock()
	stop()
	m, stop := s.start(addr)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.members[i], s.stops[i] = m, stop
	return m
}

// choose is a CommitReplication.Choose: the stores as they are now.
func (s *wipeableStores) choose(context.Context) ([]ledger.Member, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.members), nil
}

// TestCommitLedgerRollsWhenAStoreIsWiped: a store of the leader's commit
// ledger comes back wiped (a new incarnation on the same address). The
// leader closes that commit ledger at its LAC and goes on in a new one of
// the same epoch, on the stores as they are now, recorded after it in
// seq/commit-ledgers — the term goes on. A new leader then replays both
// ledgers: every acknowledged offset is Written in its commit map. Before,
// the leader wrote on with two copies until the next fault, and a
// recovery of that commit ledger could wait for the one store left holding
// its tail (40–50 s stalls in the chaos runs).
func TestCommitLedgerRollsWhenAStoreIsWiped(t *testing.T) {
	ctx := context.Background()
	c := newTestCluster(t)
	commitStores := &wipeableStores{t: t}
	for range 3 {
		commitStores.add()
	}
	c.chooseCommit = commitStores.choose
	a := c.startNode()
	first := c.waitServing(a)
	epoch := first.node.Status().Epoch
	b := c.startNode()
	in := c.newIngest(ctx, "ingest-1")
	if err := in.connect(ctx); err != nil {
		t.Fatal(err)
	}
	in.produce(ctx, 20)
	store := &epochStore{cli: c.cli}
	before, _, err := store.commitLedgers(ctx)
	if err != nil || len(before.Ledgers) != 1 {
		t.Fatalf("commit ledgers before the wipe: %+v %v", before, err)
	}

	wiped := commitStores.wipe(2)
	var after commitLedgerList
	deadline := time.Now().Add(20 * time.Second)
	for len(after.Ledgers) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the commit ledger was not rolled after its store was wiped: %+v", after)
		}
		in.produce(ctx, 2)
		if after, _, err = store.commitLedgers(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := first.node.Status().Epoch; got != epoch || !first.node.Status().Serving {
		t.Fatalf("leader status %+v after the roll, want epoch %d serving", first.node.Status(), epoch)
	}
	if after.Ledgers[0] != before.Ledgers[0] || after.Ledgers[1].Epoch != epoch {
		t.Fatalf("commit ledgers %+v, want %+v then one of epoch %d", after.Ledgers, before.Ledgers, epoch)
	}
	closed, err := ledger.Get(ctx, c.cli, before.Ledgers[0].Ledger)
	if err != nil || closed.State != ledger.StateClosed {
		t.Fatalf("rolled commit ledger %+v %v, want closed", closed, err)
	}
	next, err := ledger.Get(ctx, c.cli, after.Ledgers[1].Ledger)
	if err != nil || !slices.Contains(next.Ensemble, wiped) {
		t.Fatalf("new commit ledger %+v %v, want the wiped store's new incarnation %+v in its ensemble", next, err, wiped)
	}

	// The new leader replays both commit ledgers of the epoch.
	checkFailover(ctx, t, c, in, epoch, func() { c.revokeLeader(ctx) }, a, b)
}
