package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"orderlog/client"
	"orderlog/ingest"
	"orderlog/ingest/ledger"
)

// TestLedgersRollOffAWipedStore: three nodes, ledgers and the commit
// ledger W=3/A=2. One node's disk is replaced: it stops, its WAL directory
// is deleted, and it comes back on the same address, its store a new
// incarnation. Every open ledger that named the lost store — the other
// nodes' ingest ledgers and the sequencer's commit ledger — is rolled onto
// a new ensemble within seconds, and everything acknowledged reads back.
// Before, the writers went on with two copies of every new entry until the
// next fault; with that fault, a recovery could wait for the one store
// holding a ledger's tail.
func TestLedgersRollOffAWipedStore(t *testing.T) {
	etcd, cli := startEtcd(t)
	defer etcd.Close()
	defer cli.Close()
	seq := startClusterNode(t, etcd, Roles{}, ingest.AckQuorum)
	defer seq.Close()
	other := startClusterNode(t, etcd, Roles{Ingest: true}, ingest.AckQuorum)
	defer other.Close()
	wipedDir := t.TempDir()
	wipedCfg := Config{Roles: Roles{Ingest: true}, EtcdEndpoints: []string{etcd.Endpoint()}, DataDir: wipedDir,
		NodeName: "wiped", GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", Logger: testLogger(t),
		Ingest: ingest.Config{W: 3, A: 2, Tolerate: 1}, Commit: Replication{W: 3, A: 2, Tolerate: 1}}
	wiped, err := Start(wipedCfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	waitAllReady(t, ctx, seq, other, wiped)

	var producers []*client.Producer
	for i, s := range []*Server{seq, other} {
		p, err := dial(t, s).NewProducer(ctx, fmt.Sprintf("p%d", i), client.ProducerOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		producers = append(producers, p)
	}
	acked := 0
	produce := func() {
		t.Helper()
		for _, p := range producers {
			if _, err := p.Produce(ctx, msg("t", "", fmt.Sprint(acked))); err != nil {
				t.Fatal(err)
			}
			acked++
		}
	}
	produce()
	lost := wiped.store.Incarnation()
	if n := openLedgersOn(t, ctx, cli, lost); n < 2 {
		t.Fatalf("%d open ledgers on the store before its wipe, want the commit ledger and ingest ledgers", n)
	}

	wipedCfg.GRPCAddr = wiped.GRPCAddr()
	wiped.Close()
	if err := os.RemoveAll(filepath.Join(wipedDir, "wal")); err != nil {
		t.Fatal(err)
	}
	if wiped, err = Start(wipedCfg); err != nil {
		t.Fatal(err)
	}
	defer wiped.Close()
	if wiped.store.Incarnation() == lost {
		t.Fatal("the wiped store came back as the same incarnation")
	}
	start := time.Now()
	for openLedgersOn(t, ctx, cli, lost) > 0 {
		if time.Since(start) > 20*time.Second {
			t.Fatalf("%d ledgers still open on the wiped store's old incarnation after %v", openLedgersOn(t, ctx, cli, lost), time.Since(start))
		}
		produce()
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("every ledger open on the wiped store rolled %v after it came back", time.Since(start))
	produce()
	waitCommitted(t, dial(t, seq), uint64(acked))
	if got, _ := readAll(t, dial(t, seq)); len(got) != acked {
		t.Fatalf("read %d messages, %d acknowledged", len(got), acked)
	}
}

// openLedgersOn counts the open ledgers with a member of incarnation inc.
func openLedgersOn(t *testing.T, ctx context.Context, cli *clientv3.Client, inc uint64) int {
	t.Helper()
	ms, err := ledger.List(ctx, cli, ledger.Filter{States: []ledger.State{ledger.StateOpen}})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, m := range ms {
		if slices.ContainsFunc(m.Ensemble, func(member ledger.Member) bool { return member.Incarnation == inc }) {
			n++
		}
	}
	return n
}
