package ingest

import (
	"context"
	"testing"

	"orderlog/internal/apierr"
)

// limitAll is an Authorizer with a producer-session limit that admits
// every session.
type limitAll struct{}

func (limitAll) Principal(context.Context) (string, error) { return "p", nil }
func (limitAll) MayProduce(string, string) error           { return nil }
func (limitAll) AdmitProducer(string, int) error           { return nil }

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
