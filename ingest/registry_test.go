package ingest

import (
	"context"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"orderlog/internal/apierr"
	"orderlog/internal/etcdtest"
)

func startEtcd(t *testing.T) *clientv3.Client { return etcdtest.Client(t) }

func TestRegisterProducerCreatesThenBumpsEpochAndOwner(t *testing.T) {
	cli := startEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	first, previous, err := registerProducer(ctx, cli, "orders-app", "node-a")
	if err != nil {
		t.Fatal(err)
	}
	if first.ID != 1 || first.Epoch != 1 || first.Owner != "node-a" || previous.ID != 0 {
		t.Fatalf("first %+v previous %+v", first, previous)
	}
	other, _, err := registerProducer(ctx, cli, "billing", "node-a")
	if err != nil || other.ID != 2 {
		t.Fatalf("second producer %+v %v", other, err)
	}
	again, previous, err := registerProducer(ctx, cli, "orders-app", "node-b")
	if err != nil {
		t.Fatal(err)
	}
	if again.ID != 1 || again.Epoch != 2 || again.Owner != "node-b" || again.Gen != 2 || previous.Owner != "node-a" {
		t.Fatalf("again %+v previous %+v", again, previous)
	}
}

func TestConcurrentRegistrationsGiveDistinctEpochs(t *testing.T) {
	cli := startEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n = 8
	epochs := make(chan uint64, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rec, _, err := registerProducer(ctx, cli, "shared", "node")
			if err != nil {
				t.Error(err)
				return
			}
			epochs <- rec.Epoch
		}()
	}
	wg.Wait()
	close(epochs)
	seen := map[uint64]bool{}
	for e := range epochs {
		if seen[e] {
			t.Fatalf("epoch %d handed out twice", e)
		}
		seen[e] = true
	}
	if len(seen) != n {
		t.Fatalf("%d epochs for %d registrations", len(seen), n)
	}
}

func TestTopicsCreateListAndEnsure(t *testing.T) {
	cli := startEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := CreateTopic(ctx, cli, "orders"); err != nil {
		t.Fatal(err)
	}
	if err := CreateTopic(ctx, cli, "orders"); apierr.As(err).Code != apierr.TopicExists {
		t.Fatalf("second create: %v", err)
	}
	if err := CreateTopic(ctx, cli, "no/slashes"); apierr.As(err).Code != apierr.InvalidArgument {
		t.Fatalf("bad name: %v", err)
	}
	if err := ensureTopic(ctx, cli, "orders"); err != nil {
		t.Fatal(err)
	}
	if err := ensureTopic(ctx, cli, "audit"); err != nil {
		t.Fatal(err)
	}
	names, err := ListTopics(ctx, cli)
	if err != nil || len(names) != 2 || names[0] != "audit" || names[1] != "orders" {
		t.Fatalf("topics %v %v", names, err)
	}
}

// TestStateLedgerFollowsTheOwnerEvenToALowerLedgerID: node-a recorded its
// ledger 50; node-b takes the producer over while its own ledger 40 is open
// (ids are global, and ledgers live long). The record must name ledger 40,
// or a rebuild would replay node-a's ledgers and miss node-b's.
func TestStateLedgerFollowsTheOwnerEvenToALowerLedgerID(t *testing.T) {
	cli := startEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rec, _, err := registerProducer(ctx, cli, "orders-app", "node-a")
	if err != nil {
		t.Fatal(err)
	}
	if err := recordStateLedger(ctx, cli, rec.ID, "node-a", 50); err != nil {
		t.Fatal(err)
	}
	if _, _, err := registerProducer(ctx, cli, "orders-app", "node-b"); err != nil {
		t.Fatal(err)
	}
	if err := recordStateLedger(ctx, cli, rec.ID, "node-b", 40); err != nil {
		t.Fatal(err)
	}
	got, _, err := getProducer(ctx, cli, rec.ID)
	if err != nil || got.StateLedger != 40 || got.Owner != "node-b" {
		t.Fatalf("record %+v, %v: want state ledger 40 of node-b", got, err)
	}
	if err := recordStateLedger(ctx, cli, rec.ID, "node-a", 60); err == nil {
		t.Fatal("a former owner recorded a state ledger")
	}
}
