package node

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"orderlog/client"
	"orderlog/ingest"
	"orderlog/ingest/ledger"
	"orderlog/internal/etcdserver"
)

// TestTwoOfThreeStoresStillWrite: a cluster configured for W=3/A=2 with
// only two stores registered (the third node's disk is gone) still
// elects a sequencer — whose commit ledger is degraded — and ingest nodes
// still open ledgers, so writes are acknowledged and committed. Before,
// the sequencer never campaigned ("2 stores registered, a ledger needs 3")
// and no write was possible at all.
func TestTwoOfThreeStoresStillWrite(t *testing.T) {
	tc := startTwoOfThree(t)
	acks, err := tc.producer.Produce(tc.ctx, msg("t", "", "on two stores"))
	if err != nil {
		t.Fatal(err)
	}
	waitCommitted(t, dial(t, tc.ingests[0]), acks[0].Offset+1)
	checkAllDegraded(t, tc.ctx, tc.cli)
}

// twoOfThree is a cluster configured for W=3/A=2 with two ingest nodes
// (two stores) and a sequencer node, and a producer on the first ingest
// node. Everything stops when the test ends.
type twoOfThree struct {
	ctx      context.Context
	etcd     *etcdserver.Server
	cli      *clientv3.Client
	ingests  []*Server
	producer *client.Producer
}

func startTwoOfThree(t *testing.T) twoOfThree {
	t.Helper()
	etcd, cli := startEtcd(t)
	t.Cleanup(func() { cli.Close(); etcd.Close() })
	tc := twoOfThree{etcd: etcd, cli: cli}
	for range 2 {
		s := startClusterNode(t, etcd, Roles{Ingest: true}, ingest.AckQuorum)
		t.Cleanup(s.Close)
		tc.ingests = append(tc.ingests, s)
	}
	seq := startClusterNode(t, etcd, Roles{Sequencer: true}, ingest.AckQuorum)
	t.Cleanup(seq.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	tc.ctx = ctx
	waitAllReady(t, ctx, append(tc.ingests, seq)...)
	p, err := dial(t, tc.ingests[0]).NewProducer(ctx, "degraded", client.ProducerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	tc.producer = p
	return tc
}

// checkAllDegraded: every ledger is on two stores and records W=3.
func checkAllDegraded(t *testing.T, ctx context.Context, cli *clientv3.Client) {
	t.Helper()
	ms, err := ledger.List(ctx, cli, ledger.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) < 2 { // the commit ledger and an ingest ledger at least
		t.Fatalf("%d ledgers", len(ms))
	}
	for _, m := range ms {
		if m.W != 2 || m.IntendedW != 3 || !m.Degraded() {
			t.Errorf("ledger %d of %s: W=%d intended %d", m.ID, m.WriterIncarnation, m.W, m.IntendedW)
		}
	}
}

// TestDegradedLedgersRollOnceAFullEnsembleIsBack: ledgers created on two
// stores while the third node was away (W=3, A=2) are rolled onto three
// stores once it is back: ingest ledgers and the commit ledger, within a
// few seconds. A degraded ledger has W = A: after the next fault its
// recovery would wait for the failed store (the chaos runs' 20–40 s
// commit-ledger recoveries, "answers=[…=no reply …=PRESENT fenced]").
func TestDegradedLedgersRollOnceAFullEnsembleIsBack(t *testing.T) {
	tc := startTwoOfThree(t)
	ctx, cli, p := tc.ctx, tc.cli, tc.producer
	if _, err := p.Produce(ctx, msg("t", "", "on two stores")); err != nil {
		t.Fatal(err)
	}
	checkAllDegraded(t, ctx, cli)

	third := startClusterNode(t, tc.etcd, Roles{Ingest: true}, ingest.AckQuorum)
	defer third.Close()
	start := time.Now()
	for {
		if _, err := p.Produce(ctx, msg("t", "", "rolling")); err != nil {
			t.Fatal(err)
		}
		open, err := ledger.List(ctx, cli, ledger.Filter{States: []ledger.State{ledger.StateOpen}})
		if err != nil {
			t.Fatal(err)
		}
		degraded := 0
		for _, m := range open {
			if m.Degraded() {
				degraded++
			}
		}
		if degraded == 0 && len(open) >= 2 {
			break
		}
		if time.Since(start) > 20*time.Second {
			t.Fatalf("%d of %d open ledgers still degraded %v after the third store came back", degraded, len(open), time.Since(start))
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("every open ledger on three stores %v after the third store came back", time.Since(start))
}
