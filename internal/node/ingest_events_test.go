package node

import (
	"context"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"orderlog/client"
	"orderlog/internal/event"
)

// eventLog records the ingest events a node fires.
type eventLog struct {
	mu        sync.Mutex
	takeovers []event.TakeoverInfo
	opened    []event.LedgerInfo
	leaseLost chan event.LeaseInfo
}

func (l *eventLog) listener() event.Listener {
	return event.Listener{
		ProducerTakeover: func(i event.TakeoverInfo) { l.mu.Lock(); l.takeovers = append(l.takeovers, i); l.mu.Unlock() },
		LedgerOpened:     func(i event.LedgerInfo) { l.mu.Lock(); l.opened = append(l.opened, i); l.mu.Unlock() },
		LeaseLost:        func(i event.LeaseInfo) { l.leaseLost <- i },
	}
}

// The ingest node tells its listener of the ledgers it opens, of a producer
// it takes over (naming the incarnation it took it from), and of its lease
// when etcd revokes it.
func TestIngestEventsNameLedgersTakeoversAndLeaseLoss(t *testing.T) {
	dir := t.TempDir()
	first := &eventLog{leaseLost: make(chan event.LeaseInfo, 1)}
	s := startServerWith(t, Config{DataDir: dir, Events: first.listener()})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p, err := dial(t, s).NewProducer(ctx, "events", client.ProducerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Produce(ctx, msg("t", "", "a")); err != nil {
		t.Fatal(err)
	}
	p.Close()
	oldIncarnation := s.ingest.Incarnation()
	first.mu.Lock()
	if len(first.opened) == 0 || first.opened[0].Writer != oldIncarnation || first.opened[0].Ledger == 0 {
		t.Fatalf("ledgers opened: %+v (node %s)", first.opened, oldIncarnation)
	}
	first.mu.Unlock()
	s.Close()

	second := &eventLog{leaseLost: make(chan event.LeaseInfo, 1)}
	s = startServerWith(t, Config{DataDir: dir, Events: second.listener()})
	defer s.Close()
	again, err := dial(t, s).NewProducer(ctx, "events", client.ProducerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	again.Close()
	second.mu.Lock()
	if len(second.takeovers) != 1 || second.takeovers[0].FromOwner != oldIncarnation ||
		second.takeovers[0].ToOwner != s.ingest.Incarnation() || second.takeovers[0].Name != "events" {
		t.Fatalf("takeovers after the restart: %+v (from %s)", second.takeovers, oldIncarnation)
	}
	second.mu.Unlock()

	lease, incarnation := s.ingest.LeaseID(), s.ingest.Incarnation()
	if _, err := s.cli.Revoke(ctx, clientv3.LeaseID(lease)); err != nil {
		t.Fatal(err)
	}
	select {
	case lost := <-second.leaseLost:
		if lost.LeaseID != lease || lost.Holder != "ingest "+incarnation {
			t.Fatalf("lease lost: %+v, want lease %d of %s", lost, lease, incarnation)
		}
	case <-ctx.Done():
		t.Fatal("no LeaseLost event after the ingest lease was revoked")
	}
	// The node registers again under a new incarnation and takes the
	// producer back when asked: writes go on without a restart.
	if err := s.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if s.ingest.Incarnation() == incarnation || s.ingest.LeaseID() == 0 {
		t.Fatalf("still incarnation %s, lease %d", s.ingest.Incarnation(), s.ingest.LeaseID())
	}
	p, err = dial(t, s).NewProducer(ctx, "events", client.ProducerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.Produce(ctx, msg("t", "", "after the lease")); err != nil {
		t.Fatal(err)
	}
}
