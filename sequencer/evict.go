package sequencer

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"orderlog/internal/grpcopt"
)

// A standby that finds the leader gone revokes the leader's election
// lease instead of waiting out its TTL, which, when the leader's node also
// held etcd's raft leadership, etcd extends by its own election and
// election timeout: 5 s where the TTL is 2 s. A leader whose connections
// are refused (or closed at once) is evicted after leaderGoneFor; one that
// answers nothing (paused, cut off) after leaderSilentFor, and only once
// this standby has seen it lead for leaderSettleFor, so that two standbys
// cut off from each other but not from etcd depose each other at most
// that often. Revoking a live leader's lease is safe: the new leader
// fences its commit ledger before it grants (DESIGN.md §5), and the old
// one stops leading when it finds its lease gone. A standby revokes at
// most once every leaderSettleFor.
const (
	// leaderProbeEvery is how often a standby probes the leader.
	leaderProbeEvery = 150 * time.Millisecond
	// leaderProbeTimeout bounds one probe.
	leaderProbeTimeout = 500 * time.Millisecond
	// leaderGoneFor is how long every probe must have found the leader's
	// connections refused before its lease is revoked.
	leaderGoneFor = 450 * time.Millisecond
	// leaderSilentFor is how long probes must have gone unanswered (or
	// refused) after a first unanswered one before the lease of a leader
	// seen for leaderSettleFor is revoked: with the first probe's own
	// timeout, 1.5 s of silence.
	leaderSilentFor = time.Second
	leaderSettleFor = 3 * time.Second
)

// LeaderProbe asks whether the leader at addr is alive. It returns nil
// when it answers, ErrLeaderGone when its process is gone (the connection
// is refused or closed at once), ErrLeaderSilent when it does not answer
// in time, and any other error when the answer says nothing.
type LeaderProbe func(ctx context.Context, addr string) error

var (
	// ErrLeaderGone: the leader's process does not accept connections.
	ErrLeaderGone = errors.New("sequencer: leader's process gone")
	// ErrLeaderSilent: the leader did not answer a probe in time.
	ErrLeaderSilent = errors.New("sequencer: leader silent")
)

// probeOutcome classifies one probe of the leader.
type probeOutcome int

const (
	probeAnswered probeOutcome = iota
	probeRefused
	probeUnanswered
)

func outcomeOf(err error) probeOutcome {
	switch {
	case errors.Is(err, ErrLeaderGone):
		return probeRefused
	case errors.Is(err, ErrLeaderSilent):
		return probeUnanswered
	}
	return probeAnswered // an answer, or an error that says nothing about the leader
}

// goneTracker is the eviction rule as a plain state machine: it is fed
// probe outcomes and says when the leader holding a lease has been gone or
// silent long enough. Another key at the same address starts a new run of
// probes but keeps how long the address has been seen leading: a
// process's stale key of an earlier term that leads once its current key
// is revoked needs no new settling time, and a process restarted at the
// address still gets its run.
type goneTracker struct {
	addr        string
	lease       clientv3.LeaseID
	seen        time.Time // when this tracker first saw addr lead
	since       time.Time // first probe of the current run of failed probes
	probes      int       // probes in that run
	refusedOnly bool      // every probe of the run was refused
}

// observe records one probe of the leader holding lease at addr; true
// when the lease should be revoked.
func (g *goneTracker) observe(now time.Time, addr string, lease clientv3.LeaseID, outcome probeOutcome) bool {
	switch {
	case addr != g.addr:
		*g = goneTracker{addr: addr, lease: lease, seen: now}
	case lease != g.lease:
		g.lease, g.probes = lease, 0
	}
	if outcome == probeAnswered {
		g.probes = 0
		return false
	}
	if g.probes == 0 {
		g.since, g.refusedOnly = now, true
	}
	g.probes++
	g.refusedOnly = g.refusedOnly && outcome == probeRefused
	failing := now.Sub(g.since)
	switch {
	case g.probes < 3:
		return false
	case g.refusedOnly:
		return failing >= leaderGoneFor
	}
	return failing >= leaderSilentFor && now.Sub(g.seen) >= leaderSettleFor
}

// leaderKey is the election key etcd named the leader's, and when etcd
// last named it.
type leaderKey struct {
	addr    string
	lease   clientv3.LeaseID
	created int64 // the key's create revision
	named   time.Time
}

// nameLeader is the leader to probe after etcd answered resp, err at now
// to an Election.Leader call: the key it names, none when it has none, and
// the one it named last (named then) when it cannot answer. etcd cannot
// answer while its raft elects, most often because the leader's node also
// led etcd: the probes go on meanwhile, so the lease can be revoked as
// soon as etcd answers again rather than a probe window after that.
func nameLeader(last *leaderKey, resp *clientv3.GetResponse, err error, now time.Time) *leaderKey {
	switch {
	case errors.Is(err, concurrency.ErrElectionNoLeader):
		return nil
	case err != nil:
		return last
	case len(resp.Kvs) == 0:
		return nil
	}
	kv := resp.Kvs[0]
	return &leaderKey{addr: string(kv.Value), lease: clientv3.LeaseID(kv.Lease), created: kv.CreateRevision, named: now}
}

// evictGoneLeader probes the election's leader while this node campaigns
// with lease own, and revokes the leader's lease once it is gone or silent
// (goneTracker), at most once every leaderSettleFor. etcd is asked who
// leads beside the probes, not before each, so a probe never waits on an
// etcd that elects; an unanswered probe counts as silence until its
// timeout. A revocation needs a failed probe that began shortly after etcd
// named the same leader (probeDecides): probes made while etcd could not
// answer this node may have failed because this node was the one cut
// off. It returns when ctx ends.
func (n *Node) evictGoneLeader(ctx context.Context, el *concurrency.Election, own clientv3.LeaseID) {
	if n.cfg.ProbeLeader == nil {
		return
	}
	var named atomic.Pointer[leaderKey] // the leader etcd named last
	go followLeader(ctx, el, &named)
	var gone goneTracker
	var done clientv3.LeaseID
	tick := time.NewTicker(leaderProbeEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		leader := named.Load()
		if leader == nil || leader.lease == own || leader.lease == 0 || leader.lease == done {
			continue
		}
		began := time.Now()
		outcome := probeRefused
		// A key of an earlier term of this process (its lease could not be
		// revoked while etcd elected), or one at this address older than
		// this process (a process that died here), is stale for certain:
		// no rate limit.
		// Another key at this node's address is most likely an earlier
		// process's (probing it would reach this one), but two processes
		// misconfigured to advertise one address must not depose each
		// other faster than the limit.
		ownStale := n.heldLease(leader.lease) || n.earlierProcessKey(leader.addr, leader.created)
		if !ownStale && leader.addr != n.cfg.Address {
			pctx, cancel := context.WithTimeout(ctx, leaderProbeTimeout)
			outcome = outcomeOf(n.cfg.ProbeLeader(pctx, leader.addr))
			cancel()
		}
		probed := time.Now() // after the probe: an unanswered one covers its timeout
		evict := gone.observe(probed, leader.addr, leader.lease, outcome)
		if outcome != probeAnswered {
			n.cfg.Logger.Debug("sequencer: the leader did not answer a probe", "leader", leader.addr,
				"refused", outcome == probeRefused, "seen_for", probed.Sub(gone.seen).Round(time.Millisecond))
		}
		// The rate limit keeps two standbys cut off from each other from
		// deposing each other back and forth; it does not hold back another
		// key of the process just evicted that was queued before (a stale
		// key of an earlier term), which would lead for a TTL otherwise.
		last := n.lastEviction()
		sameProcess := leader.addr == last.addr && leader.created < last.revision
		if !evict || !probeDecides(leader, named.Load(), began) ||
			!ownStale && !sameProcess && time.Since(last.at) < leaderSettleFor {
			continue
		}
		if !gone.refusedOnly && n.cfg.Heard.heardWithin(leader.addr, leaderSilentFor, time.Now()) {
			n.cfg.Logger.Debug("sequencer: the leader does not answer probes but this process's grant stream hears it",
				"leader", leader.addr)
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, leaderProbeTimeout)
		resp, err := n.cfg.Etcd.Revoke(rctx, leader.lease)
		cancel()
		switch {
		case errors.Is(err, rpctypes.ErrLeaseNotFound): // another standby, or the TTL, was first
			n.cfg.Logger.Info("sequencer: the leader was gone or silent; its election lease was gone already",
				"leader", leader.addr, "lease", fmt.Sprintf("%x", int64(leader.lease)))
		case err != nil: // the next failed probe tries again
			n.cfg.Logger.Debug("sequencer: revoking a gone leader's election lease failed", "leader", leader.addr, "err", err)
			continue
		default:
			at := last.at
			if !ownStale && !sameProcess {
				at = time.Now()
			}
			n.noteEviction(eviction{at: at, addr: leader.addr, revision: resp.Header.Revision})
			n.cfg.Logger.Warn("sequencer: the leader was gone or silent; revoked its election lease", "leader", leader.addr,
				"lease", fmt.Sprintf("%x", int64(leader.lease)), "for", time.Since(gone.since).Round(time.Millisecond),
				"refused", gone.refusedOnly)
		}
		// The tracker stays: another key at this address that leads next is
		// the same silent process.
		done = leader.lease
	}
}

// leaderNamedWithin is how recent etcd's naming of a leader must be when
// the probe that decides its eviction begins: a few of followLeader's
// rounds, one of them slow.
const leaderNamedWithin = leaderProbeTimeout + 2*leaderProbeEvery

// probeDecides says whether a failed probe that began at began decides
// an eviction: etcd had named the leader (atStart, the naming the probe
// was made on) shortly before, so etcd answered this standby and the
// failure is no artefact of the standby being cut off itself (probes made
// while etcd could not answer it count toward the run, not toward the
// decision); and etcd still names the same leader (latest). The naming is
// the one taken before the probe: followLeader renews it while an
// unanswered probe waits out its timeout, so the latest one always came
// after the probe began, and a paused leader was never evicted.
func probeDecides(atStart, latest *leaderKey, began time.Time) bool {
	return atStart != nil && latest != nil && latest.lease == atStart.lease &&
		!atStart.named.After(began) && began.Sub(atStart.named) <= leaderNamedWithin
}

// eviction is this node's last revocation of a leader's lease: when it
// counted toward the rate limit, the leader's address, and the etcd
// revision of the revocation. It outlives a term, so a standby that leads
// and is deposed does not depose its successor faster than the limit.
type eviction struct {
	at       time.Time
	addr     string
	revision int64
}

func (n *Node) lastEviction() eviction {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.mu.evicted
}

func (n *Node) noteEviction(e eviction) {
	n.mu.Lock()
	n.mu.evicted = e
	n.mu.Unlock()
}

// followLeader keeps named at the leader etcd names (nameLeader), asking
// every leaderProbeEvery until ctx ends.
func followLeader(ctx context.Context, el *concurrency.Election, named *atomic.Pointer[leaderKey]) {
	tick := time.NewTicker(leaderProbeEvery)
	defer tick.Stop()
	for {
		lctx, cancel := context.WithTimeout(ctx, leaderProbeTimeout)
		resp, err := el.Leader(lctx)
		cancel()
		named.Store(nameLeader(named.Load(), resp, err, time.Now()))
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// ProbeGRPC is the LeaderProbe of real nodes: a gRPC health check over a
// connection of its own (a dead process refuses a new one at once, where
// an old connection may not have noticed yet). UNAVAILABLE before the
// deadline means no process took the connection.
func ProbeGRPC(ctx context.Context, addr string) error {
	return probeGRPC(ctx, addr, grpcopt.DialOptions())
}

// ProbeGRPCWith is ProbeGRPC over connections made with creds (nil:
// plaintext).
func ProbeGRPCWith(creds credentials.TransportCredentials) LeaderProbe {
	options := grpcopt.DialOptionsWith(creds)
	return func(ctx context.Context, addr string) error { return probeGRPC(ctx, addr, options) }
}

func probeGRPC(ctx context.Context, addr string, options []grpc.DialOption) error {
	conn, err := grpc.NewClient(addr, options...)
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	switch code := status.Code(err); {
	case code == codes.Unavailable && ctx.Err() == nil:
		return ErrLeaderGone
	case code == codes.DeadlineExceeded || code == codes.Unavailable && errors.Is(ctx.Err(), context.DeadlineExceeded):
		return ErrLeaderSilent
	}
	return err
}
