package node

import (
	"context"
	"os"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"orderlog/ingest"
	"orderlog/ingest/ledger"
	"orderlog/internal/keys"
)

// TestIdleLedgersRollOffAStoreReplacedAtItsAddress: a node's disk is wiped
// and it comes back at its address with a new store, while the old store's
// registration lingers (a killed node's lease outlives it, longer while
// etcd elects; here the test holds it). The open ledgers naming the old
// store — other nodes' ingest ledgers and the commit ledger — are rolled
// within seconds though nothing is written to them. Before, an idle one
// stayed open with a member gone, and when its writer's node was killed
// next, its recovery waited for that node (a chaos run's 30 s stop).
func TestIdleLedgersRollOffAStoreReplacedAtItsAddress(t *testing.T) {
	etcd, cli := startEtcd(t)
	defer etcd.Close()
	defer cli.Close()
	replication := Replication{W: 3, A: 2, Tolerate: 1}
	in := ingest.Config{W: 3, A: 2, Tolerate: 1}
	start := func(dir, addr string) *Server {
		return startTestNode(t, etcd, Config{Roles: Roles{Ingest: true, Sequencer: true}, DataDir: dir, GRPCAddr: addr,
			Ingest: in, Commit: replication})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var nodes []*Server
	defer func() {
		for _, s := range nodes {
			s.Close()
		}
	}()
	for range 3 {
		nodes = append(nodes, start(t.TempDir(), "127.0.0.1:0"))
	}
	waitAllReady(t, ctx, nodes...)
	victim := nodes[2]
	oldStore, addr, dir := victim.store.StoreID(), victim.GRPCAddr(), victim.cfg.DataDir
	old, err := cli.Get(ctx, keys.Store(oldStore))
	if err != nil || len(old.Kvs) != 1 {
		t.Fatalf("the victim's registration: %v %v", old, err)
	}
	// The commit ledger names all three stores once it rolls off the
	// degraded ensemble it may start with (fewer stores registered): on a
	// loaded machine that can come after the nodes are ready.
	for deadline := time.Now().Add(15 * time.Second); len(openLedgersNaming(t, ctx, cli, oldStore)) == 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no open ledger names the victim's store: the test exercises nothing")
		}
	}

	victim.Close()
	lease, err := cli.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, keys.Store(oldStore), string(old.Kvs[0].Value), clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	nodes[2] = start(dir, addr) // the wiped node, back at its address
	if nodes[2].store.StoreID() == oldStore {
		t.Fatal("a wiped data directory kept its store id")
	}
	waitFor(t, 15*time.Second, "no open ledger naming the replaced store", func() bool {
		return len(openLedgersNaming(t, ctx, cli, oldStore)) == 0
	})
}

// openLedgersNaming lists the open ledgers with store in their ensemble.
func openLedgersNaming(t *testing.T, ctx context.Context, cli *clientv3.Client, store string) []uint64 {
	t.Helper()
	open, err := ledger.List(ctx, cli, ledger.Filter{States: []ledger.State{ledger.StateOpen}})
	if err != nil {
		t.Fatal(err)
	}
	var ids []uint64
	for _, m := range open {
		for _, member := range m.Ensemble {
			if member.StoreID == store {
				ids = append(ids, m.ID)
			}
		}
	}
	return ids
}
