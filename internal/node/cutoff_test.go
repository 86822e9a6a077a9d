package node

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"orderlog/internal/apierr"
)

func TestCutOffNodeRefusesProducerCallsAndEndsWaitingOnes(t *testing.T) {
	var cut atomic.Pointer[error]
	cutOff := func() error {
		if err := cut.Load(); err != nil {
			return *err
		}
		return nil
	}
	reason := errors.New("ingest: no etcd quorum for 1.2s")

	// Connected: the call runs and its answer comes back as it is.
	got, err := whileConnected(context.Background(), cutOff, func(context.Context) (int, error) { return 7, nil })
	if err != nil || got != 7 {
		t.Fatalf("connected: %d, %v; want 7, nil", got, err)
	}

	// A call that waits is ended once the node finds itself cut off.
	started := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := whileConnected(context.Background(), cutOff, func(ctx context.Context) (int, error) {
			close(started)
			<-ctx.Done()
			return 0, ctx.Err()
		})
		done <- err
	}()
	<-started
	cut.Store(&reason)
	select {
	case err := <-done:
		if err == nil || apierr.As(err).Code != apierr.Timeout {
			t.Fatalf("a waiting call on a cut-off node: %v, want TIMEOUT (outcome unknown)", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a waiting call was not ended when the node was cut off")
	}

	// Cut off: refused at once, without running.
	ran := false
	_, err = whileConnected(context.Background(), cutOff, func(context.Context) (int, error) { ran = true; return 0, nil })
	if ran || err == nil || apierr.As(err).Code != apierr.Unavailable {
		t.Fatalf("cut off: ran %v, err %v; want refused with UNAVAILABLE", ran, err)
	}

	// A call that fails on its own keeps its error.
	cut.Store(nil)
	own := errors.New("its own failure")
	if _, err := whileConnected(context.Background(), cutOff, func(context.Context) (int, error) { return 0, own }); !errors.Is(err, own) {
		t.Fatalf("own failure: %v, want %v", err, own)
	}
}
