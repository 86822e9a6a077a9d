package node

import (
	"context"
	"errors"
	"time"

	"orderlog/internal/apierr"
)

// An HTTP producer cannot probe a node's Producer health the way the gRPC
// client does when its frames stall: it waits for its own timeout. A node
// that cannot own producers (canOwnProducers: not registered, or cut off,
// with neither a grant stream nor the etcd quorum for 1 s while its peers
// have the quorum or do not answer) therefore answers its HTTP producers
// 503 UNAVAILABLE at once, and ends the requests already waiting with 504
// TIMEOUT (outcome unknown) when it finds itself so, so they retry on a
// node that can log them. Ending a waiting request is as safe as a
// client's timeout: the producer's sequence numbers (or its
// Idempotency-Key) make the retry exactly-once, and the node taking the
// producer over fences this one first.
const cutOffCheckEvery = 250 * time.Millisecond

// cutOffError is the cause a waiting request is cancelled with.
type cutOffError struct{ reason error }

func (e cutOffError) Error() string { return "node cut off: " + e.reason.Error() }

// whileConnected runs call unless cutOff says the node cannot own
// producers (UNAVAILABLE then), and cancels it if cutOff says so while it
// runs (TIMEOUT: the outcome is unknown). A nil cutOff runs call as it is.
func whileConnected[T any](ctx context.Context, cutOff func() error, call func(context.Context) (T, error)) (T, error) {
	var zero T
	if cutOff == nil {
		return call(ctx)
	}
	if err := cutOff(); err != nil {
		return zero, apierr.New(apierr.Unavailable, "this node cannot log producers' messages now (%v): retry on another node", err)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		t := time.NewTicker(cutOffCheckEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if err := cutOff(); err != nil {
				cancel(cutOffError{err})
				return
			}
		}
	}()
	v, err := call(ctx)
	var cut cutOffError
	if err != nil && errors.As(context.Cause(ctx), &cut) {
		// The frames may be logged still (the node may reconnect): the
		// outcome is unknown, and the retry must carry the same seq or key.
		return zero, apierr.New(apierr.Timeout, "this node was cut off while the request waited (%v): outcome unknown; retry on another node with the same producer seq or key", cut.reason)
	}
	return v, err
}
