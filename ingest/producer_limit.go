package ingest

import (
	"context"

	"orderlog/internal/apierr"
	"orderlog/internal/auth"
)

// ProducerSessionLimit is implemented by an Authorizer that bounds the
// producer sessions one principal holds on this node.
type ProducerSessionLimit interface {
	// AdmitProducer refuses (LIMIT_EXCEEDED) one more session for
	// principal, who holds held on this node.
	AdmitProducer(principal string, held int) error
}

// admitProducer checks principal's InitProducer of name against the
// session limit before anything is written: a refused one neither creates
// a producer nor fences one. A session the principal holds here already
// may always be initialized again (a client restarting at its limit);
// another is counted with the sessions the principal holds — the
// producers this node owns or is taking over that are bound to it — and
// the InitProducers of new ones still in flight, so that concurrent calls
// cannot all pass. Those are counted on the loop goroutine; release ends
// the reservation once the session is in the machine or has failed. A
// stopping node refuses (UNAVAILABLE) before anything is written.
func (n *Node) admitProducer(principal, name string) (release func(), err error) {
	limit, ok := n.cfg.Authorize.(ProducerSessionLimit)
	if principal == "" || !ok {
		return func() {}, nil
	}
	answer := make(chan error, 1)
	reserved := false
	if !n.do(func() {
		held, mine := n.sessionsOf(principal, name)
		if mine {
			answer <- nil
			return
		}
		if err := limit.AdmitProducer(principal, held+n.initsInFlight[principal]); err != nil {
			answer <- err
			return
		}
		n.initsInFlight[principal]++
		reserved = true
		answer <- nil
	}) {
		return nil, errStopping()
	}
	select {
	case err := <-answer:
		if err != nil {
			return nil, err
		}
	case <-n.done: // stopped before it ran
		return nil, errStopping()
	}
	if !reserved {
		return func() {}, nil
	}
	return func() {
		n.do(func() {
			if n.initsInFlight[principal]--; n.initsInFlight[principal] <= 0 {
				delete(n.initsInFlight, principal)
			}
		})
	}, nil
}

// errStopping refuses an InitProducer whose limit check could not run
// because the node is stopping: nothing is registered in etcd.
func errStopping() error { return apierr.New(apierr.Unavailable, "ingest node is shutting down") }

// sessionsOf counts the producers this node owns or takes over that are
// bound to principal, and says whether name is one of them: a walk of the
// principal's producers, not of every producer the node holds. Loop only.
func (n *Node) sessionsOf(principal, name string) (held int, mine bool) {
	n.principals.of(principal, func(id uint64, producer string) {
		if n.machine.HoldsProducer(id) {
			held++
			mine = mine || producer == name
		}
	})
	return held, mine
}

// auditFencing logs, with the caller's principal, an InitProducer that
// fenced the producer's older instances (the audit trail,
// docs/security.md): their frames are refused with PRODUCER_FENCED from
// now on. A new producer fences nothing and is not logged.
func (n *Node) auditFencing(ctx context.Context, rec, previous producerRecord) {
	if previous.Epoch == 0 {
		return
	}
	auth.Audit(ctx, n.logger, "producer fenced", "producer", rec.Name, "producer_id", rec.ID,
		"fenced_epoch", previous.Epoch, "epoch", rec.Epoch, "bound_now", previous.Principal == "" && rec.Principal != "")
}
