package sequencer

import (
	"context"
	"fmt"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"

	keeplease "orderlog/internal/lease"
)

// electionSession is the etcd session a term campaigns and leads with.
// Its lease is kept by internal/lease rather than by the session's own
// keepalive, whose end the session takes for the loss of its lease: while
// etcd elects a new raft leader, renewals go unanswered for a TTL though
// the lease lives on, and the term (a leader's, with every ingest node's
// ledgers of its epoch) ended for nothing. Done reports the lease lost for
// good: etcd says it is gone, or cannot confirm it within the TTL.
type electionSession struct {
	*concurrency.Session
	lost     <-chan struct{}
	stopKeep context.CancelFunc
}

// Done is closed once the session's lease is lost for good.
func (s *electionSession) Done() <-chan struct{} { return s.lost }

// Close revokes the lease and stops keeping it.
func (s *electionSession) Close() error {
	defer s.stopKeep()
	return s.Session.Close()
}

// newSession grants the term's lease, keeps it, and opens the session on
// it; Close revokes it.
func (n *Node) newSession(ctx context.Context) (*electionSession, error) {
	ttl := time.Duration(n.cfg.SessionTTL) * time.Second
	grant, err := n.cfg.Etcd.Grant(ctx, int64(n.cfg.SessionTTL))
	if err != nil {
		return nil, err
	}
	keepCtx, stopKeep := context.WithCancel(ctx)
	lost, err := keeplease.Keep(keepCtx, n.cfg.Etcd, grant.ID, ttl, func() {
		n.cfg.Logger.Info("sequencer: etcd election lease outlived a gap in its renewals", "addr", n.cfg.Address,
			"lease", fmt.Sprintf("%x", int64(grant.ID)))
	})
	if err == nil {
		var sess *concurrency.Session
		if sess, err = concurrency.NewSession(n.cfg.Etcd, concurrency.WithLease(grant.ID),
			concurrency.WithTTL(n.cfg.SessionTTL), concurrency.WithContext(ctx)); err == nil {
			return &electionSession{Session: sess, lost: lost, stopKeep: stopKeep}, nil
		}
	}
	stopKeep()
	rctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, _ = n.cfg.Etcd.Revoke(rctx, grant.ID)
	return nil, err
}
