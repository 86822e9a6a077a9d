package sequencer

import (
	"context"
	"fmt"
	"slices"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
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
	n.noteLease(grant.ID)
	n.noteFirstGrant(grant.ResponseHeader.Revision)
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

// maxHeldLeases bounds the election leases a process remembers: enough
// for the terms whose keys may still linger (a TTL or two).
const maxHeldLeases = 64

// noteLease remembers a lease this process granted for an election term.
func (n *Node) noteLease(id clientv3.LeaseID) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.mu.leases = append(n.mu.leases, id)
	if len(n.mu.leases) > maxHeldLeases {
		n.mu.leases = n.mu.leases[1:]
	}
}

// heldLease reports whether this process granted lease id for a term.
func (n *Node) heldLease(id clientv3.LeaseID) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Contains(n.mu.leases, id)
}

// noteFirstGrant remembers the etcd revision of this process's first
// election lease: a key at this node's address created before it is an
// earlier process's (evict.go).
func (n *Node) noteFirstGrant(revision int64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.mu.firstGrant == 0 {
		n.mu.firstGrant = revision
	}
}

// earlierProcessKey says whether a key at this node's address created at
// revision created predates this process: a stale key of a process that
// died here, which no live process keeps (etcd may still extend its lease
// at each of its raft leader changes).
func (n *Node) earlierProcessKey(addr string, created int64) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return addr == n.cfg.Address && n.mu.firstGrant != 0 && created < n.mu.firstGrant
}
