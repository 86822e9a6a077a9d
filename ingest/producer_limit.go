package ingest

import (
	"context"
	"time"

	"orderlog/internal/apierr"
	"orderlog/internal/auth"
)

// ProducerSessionLimit is implemented by an Authorizer that bounds the
// producer sessions one principal holds active on this node.
type ProducerSessionLimit interface {
	// AdmitProducer refuses (LIMIT_EXCEEDED) one more session for
	// principal, who holds active ones on this node (with a frame within
	// window, Config.ProducerActiveWindow); the soonest one of those may
	// stop counting is in retryAfter if it stays idle.
	AdmitProducer(principal string, active int, window, retryAfter time.Duration) error
}

// admitProducer checks principal's InitProducer of name against the
// session limit before anything is written: a refused one neither creates
// a producer nor fences one. A session the principal holds here already
// may always be initialized again (a client restarting at its limit);
// another is counted with the sessions the principal holds active — the
// producers this node owns or is taking over that are bound to it and
// started or had a frame within Config.ProducerActiveWindow — and the
// InitProducers of new ones still in flight, so that concurrent calls
// cannot all pass. Idle sessions are held until ProducerExpiry but do not
// count: a client that takes a new name at each restart would otherwise
// be locked out until its old sessions expire (days). Those are counted on the loop goroutine; release ends
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
		active, retryAfter, mine := n.sessionsOf(principal, name)
		if mine {
			answer <- nil
			return
		}
		window := n.cfg.ProducerActiveWindow
		if err := limit.AdmitProducer(principal, active+n.initsInFlight[principal], window, retryAfter); err != nil {
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
// bound to principal and were active within the window, says how soon the
// least recently active of those leaves it if it stays idle (the window
// when none), and whether name is one the principal holds, active or not.
// It walks the principal's producers only, and forgets those this node no
// longer holds (dropped, expired or moved), so the walk is over the
// sessions held. Loop only.
func (n *Node) sessionsOf(principal, name string) (active int, retryAfter time.Duration, mine bool) {
	window := n.cfg.ProducerActiveWindow
	retryAfter = window
	n.principals.of(principal, func(id uint64, producer string) bool {
		idle, held := n.machine.ProducerIdle(id)
		if !held {
			return false
		}
		mine = mine || producer == name
		if idle < window {
			active++
			retryAfter = min(retryAfter, window-idle)
		}
		return true
	})
	return active, retryAfter, mine
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
