// Package lease keeps an etcd lease alive across gaps in its keepalive
// stream.
//
// The etcd client ends a lease's keepalive stream when no renewal was
// answered for a whole TTL. That happens while etcd elects a new raft
// leader (a killed or paused leader member: one to two seconds), though
// the lease itself lives on: a new leader gives every lease a full TTL
// again. A process that took the end of the stream for the loss of its
// lease gave up everything the lease held (an ingest node's producers, a
// store's registration) for nothing. Keep asks etcd whether the lease still
// exists before it reports a loss, and renews it again if it does.
package lease

import (
	"context"
	"errors"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// askEvery is the pause between TimeToLive calls etcd did not answer, and
// askTimeout bounds each: a member forwards the call to the raft leader it
// knows, and one forwarded to a paused leader waits for etcd's request
// timeout (7 s) while a new leader may long be there to answer.
const (
	askEvery   = 100 * time.Millisecond
	askTimeout = 500 * time.Millisecond
)

// Keep renews lease id until it is lost — etcd says it no longer exists,
// or does not answer for ttl after a keepalive stream ended — or ctx ends,
// then closes the returned channel. onGap, if not nil, is told of each
// keepalive stream that ended while the lease lived on.
//
// Each stream is opened on a lessor of its own, and a new one after a gap:
// a member handles a keepalive stream's renewals one at a time and
// forwards each to the raft leader it knows, so one renewal forwarded to a
// paused leader held every later one on that stream for etcd's request
// timeout, and the new leader let the lease expire meanwhile (a chaos run
// lost every lease of the two live nodes this way).
func Keep(ctx context.Context, cli *clientv3.Client, id clientv3.LeaseID, ttl time.Duration, onGap func()) (<-chan struct{}, error) {
	lessor := clientv3.NewLease(cli)
	keepAlive, err := lessor.KeepAlive(ctx, id)
	if err != nil {
		lessor.Close()
		return nil, err
	}
	lost := make(chan struct{})
	go func() {
		defer close(lost)
		defer func() { lessor.Close() }()
		for {
			for range keepAlive {
			}
			lessor.Close()
			if ctx.Err() != nil || !survived(ctx, cli, id, ttl) {
				return
			}
			lessor = clientv3.NewLease(cli)
			if keepAlive, err = lessor.KeepAlive(ctx, id); err != nil {
				return
			}
			if onGap != nil {
				onGap()
			}
		}
	}()
	return lost, nil
}

// survived asks etcd, for up to ttl, whether the lease still exists.
func survived(ctx context.Context, cli *clientv3.Client, id clientv3.LeaseID, ttl time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, ttl)
	defer cancel()
	for {
		actx, cancelAsk := context.WithTimeout(ctx, askTimeout)
		resp, err := cli.TimeToLive(actx, id)
		cancelAsk()
		switch {
		case err == nil && resp.TTL > 0:
			return true
		case err == nil && resp.TTL == 0:
			// etcd truncates the remaining TTL toward zero, so 0 is a
			// lease with under a second left or one expired under a
			// second ago (not yet revoked): a renewal tells them apart,
			// and saves the first.
			if alive, known := renewOnce(ctx, cli, id); known {
				return alive
			}
		case err == nil, errors.Is(err, rpctypes.ErrLeaseNotFound): // -1: gone
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(askEvery):
		}
	}
}

// renewOnce renews the lease once; known is false if etcd did not answer
// within askTimeout.
func renewOnce(ctx context.Context, cli *clientv3.Client, id clientv3.LeaseID) (alive, known bool) {
	actx, cancel := context.WithTimeout(ctx, askTimeout)
	defer cancel()
	resp, err := cli.KeepAliveOnce(actx, id)
	switch {
	case err == nil:
		return resp.TTL > 0, true
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		return false, true
	}
	return false, false
}
