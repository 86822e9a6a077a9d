package ingest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"orderlog/ingest/pipeline"
	"orderlog/internal/apierr"
	"orderlog/internal/event"
	"orderlog/internal/keys"
	keeplease "orderlog/internal/lease"
)

// registration is one incarnation of the node: its name, the etcd lease
// its liveness key keys.Ingest(incarnation) is bound to (0 while it is
// being registered), and its grant session. Ledgers can be created only
// while the liveness key exists.
type registration struct {
	incarnation string
	lease       clientv3.LeaseID
	grants      GrantSession
}

func newIncarnation(nodeName string) string {
	return fmt.Sprintf("%s-%d", nodeName, time.Now().UnixNano())
}

// current is the registration, for goroutines other than the loop (the
// loop, its only writer, reads n.reg directly).
func (n *Node) current() registration {
	n.regMu.Lock()
	defer n.regMu.Unlock()
	return n.reg
}

// setRegistration replaces the registration; loop goroutine only.
func (n *Node) setRegistration(r registration) {
	n.regMu.Lock()
	n.reg = r
	n.regMu.Unlock()
}

// register creates incarnation's liveness key bound to a new lease, keeps
// the lease alive, and opens the incarnation's grant session.
func (n *Node) register(ctx context.Context, incarnation string) (registration, error) {
	lease, err := n.etcd.Grant(ctx, int64(n.cfg.LeaseTTL/time.Second))
	if err != nil {
		return registration{}, fmt.Errorf("ingest lease: %w", err)
	}
	if _, err := n.etcd.Put(ctx, keys.Ingest(incarnation), n.cfg.Address, clientv3.WithLease(lease.ID)); err != nil {
		return registration{}, fmt.Errorf("ingest liveness key: %w", err)
	}
	lost, err := keeplease.Keep(n.leases, n.etcd, lease.ID, n.cfg.LeaseTTL, func() {
		n.logger.Info("ingest: etcd lease outlived a gap in its renewals", "incarnation", incarnation, "lease", int64(lease.ID))
	})
	if err != nil {
		return registration{}, fmt.Errorf("ingest lease keepalive: %w", err)
	}
	go n.watchLease(incarnation, lease.ID, lost)
	grants := n.newGrants(incarnation, int64(lease.ID), n.CloseLedgerRequested)
	return registration{incarnation: incarnation, lease: lease.ID, grants: grants}, nil
}

// watchLease waits for the lease to be lost. Unless the node is stopping,
// the lease expired or was revoked (by a node taking one of this node's
// producers over): the node gives up everything it owned.
func (n *Node) watchLease(incarnation string, lease clientv3.LeaseID, lost <-chan struct{}) {
	<-lost
	select {
	case <-n.stop:
		return
	default:
	}
	n.do(func() { n.leaseLost(incarnation, lease) })
}

// leaseLost hands the machine the loss of every producer the incarnation
// owned and registers a new incarnation in the background. Until it is
// registered the node can open no ledger and is not ready. LeaseLost is
// fired once all that is done, so a listener sees the new incarnation.
func (n *Node) leaseLost(incarnation string, lease clientv3.LeaseID) {
	if n.reg.incarnation != incarnation {
		return // an incarnation already given up
	}
	defer n.events.LeaseLost(event.LeaseInfo{Holder: "ingest " + incarnation, LeaseID: int64(lease)})
	for _, id := range n.writerIDs() {
		n.noteCloseReason(id, "etcd lease lost")
		n.closeWriter(id) // as the old incarnation: the machine forgets the ledger
	}
	n.machine.OwnershipLost(apierr.New(apierr.Unavailable,
		"ingest node %s lost its etcd lease; its producers move: retry", incarnation))
	old := n.reg
	next := newIncarnation(n.cfg.NodeName)
	n.setRegistration(registration{incarnation: next, grants: newRefusingSession(old.grants.Epoch())})
	n.async(old.grants.Close)
	n.logger.Warn("ingest: etcd lease lost, gave up every producer; registering again",
		"old_incarnation", incarnation, "incarnation", next)
	n.async(func() { n.reregister(next) })
}

// reregister registers incarnation, retrying while etcd does not answer,
// and installs it unless the node moved on meanwhile.
func (n *Node) reregister(incarnation string) {
	for pause := retryPause; ; pause = min(2*pause, 5*time.Second) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		reg, err := n.register(ctx, incarnation)
		cancel()
		if err == nil {
			if !n.do(func() { n.installRegistration(reg) }) {
				reg.grants.Close()
			}
			return
		}
		n.logger.Warn("ingest: cannot register again (retrying)", "incarnation", incarnation, "err", err)
		if !n.sleep(pause) {
			return
		}
	}
}

func (n *Node) installRegistration(reg registration) {
	if n.reg.incarnation != reg.incarnation {
		n.async(reg.grants.Close)
		return
	}
	n.setRegistration(reg)
	n.logger.Info("ingest: registered", "incarnation", reg.incarnation, "lease", int64(reg.lease))
}

// fenceOwner revokes the etcd lease of a producer's previous owner if that
// incarnation is still registered (DESIGN.md §6). From then on it can
// create no ledger and its grant session ends, and it gives up all its
// producers; the takeover's rebuild, which fences its ledgers, then sees
// everything it will ever have logged for the producer.
func (n *Node) fenceOwner(ctx context.Context, previous, self string) error {
	if previous == "" || previous == self {
		return nil
	}
	resp, err := n.etcd.Get(ctx, keys.Ingest(previous))
	if err != nil {
		return apierr.New(apierr.Unavailable, "look up the previous owner %s: %v", previous, err)
	}
	if len(resp.Kvs) == 0 {
		return nil // its lease expired or was revoked already
	}
	_, err = n.etcd.Revoke(ctx, clientv3.LeaseID(resp.Kvs[0].Lease))
	if err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return apierr.New(apierr.Unavailable, "revoke the lease of the previous owner %s: %v", previous, err)
	}
	n.logger.Info("ingest: revoked the lease of a producer's previous owner", "previous", previous, "incarnation", self)
	return nil
}

// refusingSession stands in for a grant session while the node registers
// again: it refuses every grant, and reports go nowhere (the sequencer
// learns the old incarnation's ledgers from the stores).
type refusingSession struct {
	epoch   int64
	replies chan GrantReply
}

func newRefusingSession(epoch int64) *refusingSession {
	return &refusingSession{epoch: epoch, replies: make(chan GrantReply, 4096)}
}

func (s *refusingSession) Epoch() int64    { return s.epoch }
func (s *refusingSession) Streams() uint64 { return 0 }

func (s *refusingSession) Grant(batchID, ledger uint64, _ int) {
	select {
	case s.replies <- GrantReply{BatchID: batchID, Ledger: ledger, Err: apierr.New(apierr.Unavailable, "ingest node is registering again")}:
	default: // the node opens no ledger meanwhile, so nobody asks this often
	}
}

func (s *refusingSession) Written(uint64, int64, pipeline.Span) {}
func (s *refusingSession) Unused(uint64, pipeline.Span)         {}
func (s *refusingSession) LedgerClosed(uint64)                  {}
func (s *refusingSession) Replies() <-chan GrantReply           { return s.replies }
func (s *refusingSession) Close()                               {}
