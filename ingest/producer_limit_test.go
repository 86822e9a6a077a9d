package ingest

import (
	"context"
	"strconv"
	"testing"
	"time"

	"orderlog/ingest/coordinator"
	"orderlog/ingest/pipeline"
	"orderlog/internal/apierr"
)

// limitAll is an Authorizer with a producer-session limit that admits
// every session.
type limitAll struct{}

func (limitAll) Principal(context.Context) (string, error)                     { return "p", nil }
func (limitAll) MayProduce(string, string) error                               { return nil }
func (limitAll) AdmitProducer(string, int, time.Duration, time.Duration) error { return nil }

// TestAdmitProducerStopping: on a stopping node the limit check cannot run,
// and admitProducer refuses with UNAVAILABLE rather than letting
// InitProducer go on to register the producer in etcd.
func TestAdmitProducerStopping(t *testing.T) {
	n := &Node{cfg: Config{Authorize: limitAll{}}, stop: make(chan struct{}), done: make(chan struct{}),
		initsInFlight: map[string]int{}}
	close(n.stop)
	close(n.done)
	release, err := n.admitProducer("p", "name")
	if apierr.As(err).Code != apierr.Unavailable || release != nil {
		t.Fatalf("admitProducer on a stopped node: %v", err)
	}
}

// TestSessionsOfCountsActiveSessionsOnly: a principal's sessions count
// against its limit while they had a frame (or started) within the
// window; one idle longer is still its own (mine) but does not count, and
// the retry-after is when the least recently active leaves the window.
// Producers the node no longer holds are forgotten by the walk.
func TestSessionsOfCountsActiveSessionsOnly(t *testing.T) {
	m, err := coordinator.New(coordinator.Config{Pipeline: pipeline.Config{}})
	if err != nil {
		t.Fatal(err)
	}
	n := &Node{cfg: Config{ProducerActiveWindow: time.Minute}, machine: m}
	start := time.Unix(1_000_000, 0)
	m.Tick(start)
	m.InitProducer(1, 1, 1)
	n.principals.set(1, "p", "a")
	m.Tick(start.Add(20 * time.Second))
	m.InitProducer(2, 1, 2)
	n.principals.set(2, "p", "b")
	n.principals.set(3, "p", "gone") // dropped or moved: not held here
	n.principals.set(4, "q", "other")

	active, retryAfter, mine := n.sessionsOf("p", "a")
	if active != 2 || !mine || retryAfter != 40*time.Second {
		t.Fatalf("at 20s: %d active, retry after %v, mine %v; want 2, 40s, true", active, retryAfter, mine)
	}
	if _, ok := n.principals.get(3); ok {
		t.Fatal("producer 3, not held, is still remembered")
	}
	if _, ok := n.principals.get(4); !ok {
		t.Fatal("another principal's producer was forgotten")
	}
	m.Tick(start.Add(70 * time.Second))
	if active, retryAfter, mine = n.sessionsOf("p", "new"); active != 1 || mine || retryAfter != 10*time.Second {
		t.Fatalf("at 70s: %d active, retry after %v, mine %v; want 1, 10s, false", active, retryAfter, mine)
	}
	m.Tick(start.Add(time.Hour))
	if active, retryAfter, mine = n.sessionsOf("p", "b"); active != 0 || !mine || retryAfter != time.Minute {
		t.Fatalf("an hour on: %d active, retry after %v, mine %v; want 0, 1m, true (idle, still held)", active, retryAfter, mine)
	}
}

// TestPrincipalsSweepForgetsWhatIsNotHeld: producers of principals that
// never call InitProducer again are forgotten once the index outgrows
// the producers held, not kept for ever.
func TestPrincipalsSweepForgetsWhatIsNotHeld(t *testing.T) {
	var p producerPrincipals
	held := func(id uint64) bool { return id == 7 }
	for id := range uint64(sweepSlack + 10) {
		p.set(id, "p"+strconv.FormatUint(id%5, 10), "n")
	}
	p.sweep(1, held)
	if len(p.known) != 1 || len(p.byPrincipal) != 1 || len(p.byPrincipal["p2"]) != 1 {
		t.Fatalf("after a sweep: %d known, %d principals", len(p.known), len(p.byPrincipal))
	}
	p.set(8, "p3", "n")
	p.sweep(1, held)
	if _, ok := p.get(8); !ok {
		t.Fatal("a sweep below the slack forgot a producer")
	}
}
