package sequencer

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"orderlog/internal/grpcopt"
)

// A standby that sees the leader's process gone revokes the leader's
// election lease instead of waiting out its TTL, which, when the leader's
// node also held etcd's raft leadership, etcd extends by its own election
// and election timeout: 5 s where the TTL is 2 s. Only a leader refusing
// connections (or whose connections close at once) is evicted; one that is
// slow, paused or cut off answers nothing, and its lease decides. Revoking
// a live leader's lease is safe: the new leader fences its commit ledger
// before it grants (DESIGN.md §5), and the old one stops leading when it
// finds its lease gone.
const (
	// leaderProbeEvery is how often a standby probes the leader.
	leaderProbeEvery = 150 * time.Millisecond
	// leaderProbeTimeout bounds one probe; a probe that times out says
	// nothing about the leader's process.
	leaderProbeTimeout = 500 * time.Millisecond
	// leaderGoneFor is how long every probe must have found the leader
	// gone before its lease is revoked.
	leaderGoneFor = 450 * time.Millisecond
)

// LeaderProbe asks whether the leader at addr is alive. It returns
// ErrLeaderGone when its process is gone (the connection is refused or
// closed at once), nil when it answers, and any other error when the
// answer says nothing (a timeout).
type LeaderProbe func(ctx context.Context, addr string) error

// ErrLeaderGone: the leader's process does not accept connections.
var ErrLeaderGone = errors.New("sequencer: leader's process gone")

// goneTracker is the eviction rule as a plain state machine: it is fed
// probe outcomes and says when the leader identified by lease has been
// gone long enough.
type goneTracker struct {
	lease  clientv3.LeaseID
	since  time.Time // first probe of the current run of "gone" answers
	probes int       // probes in that run
}

// observe records one probe of the leader holding lease; true when the
// lease should be revoked.
func (g *goneTracker) observe(now time.Time, lease clientv3.LeaseID, gone bool) bool {
	if lease != g.lease || !gone {
		*g = goneTracker{lease: lease}
		if !gone {
			return false
		}
	}
	if g.probes == 0 {
		g.since = now
	}
	g.probes++
	return g.probes >= 3 && now.Sub(g.since) >= leaderGoneFor
}

// evictGoneLeader probes the election's leader while this node campaigns
// and revokes its lease once it is gone (see leaderGoneFor). It returns
// when ctx ends.
func (n *Node) evictGoneLeader(ctx context.Context, el *concurrency.Election) {
	if n.cfg.ProbeLeader == nil {
		return
	}
	var gone goneTracker
	tick := time.NewTicker(leaderProbeEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		resp, err := el.Leader(ctx)
		if err != nil || len(resp.Kvs) == 0 {
			continue // no leader, or etcd cannot say: nothing to evict
		}
		kv := resp.Kvs[0]
		addr, lease := string(kv.Value), clientv3.LeaseID(kv.Lease)
		if addr == n.cfg.Address || lease == 0 {
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, leaderProbeTimeout)
		err = n.cfg.ProbeLeader(pctx, addr)
		cancel()
		if !gone.observe(time.Now(), lease, errors.Is(err, ErrLeaderGone)) {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err = n.cfg.Etcd.Revoke(rctx, lease)
		cancel()
		if err != nil { // etcd has no quorum yet, say: the next probe tries again
			n.cfg.Logger.Info("sequencer: revoking a gone leader's election lease failed", "leader", addr, "err", err)
			continue
		}
		n.cfg.Logger.Warn("sequencer: the leader's process was gone; revoked its election lease", "leader", addr,
			"lease", fmt.Sprintf("%x", int64(lease)), "gone_for", time.Since(gone.since).Round(time.Millisecond))
		gone = goneTracker{}
	}
}

// ProbeGRPC is the LeaderProbe of real nodes: a gRPC health check over a
// connection of its own (a dead process refuses a new one at once, where
// an old connection may not have noticed yet). UNAVAILABLE before the
// deadline means no process took the connection.
func ProbeGRPC(ctx context.Context, addr string) error {
	conn, err := grpc.NewClient(addr, grpcopt.DialOptions()...)
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if status.Code(err) == codes.Unavailable && ctx.Err() == nil {
		return ErrLeaderGone
	}
	return err
}
