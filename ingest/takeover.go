package ingest

import (
	"context"
	"errors"
	"time"

	"orderlog/ingest/coordinator"
	"orderlog/ingest/producer"
	"orderlog/internal/apierr"
	"orderlog/internal/event"
)

// doFor runs fn on the loop goroutine if incarnation is still the node's:
// the outcome of an operation an older incarnation started means nothing
// to the machine any more (it gave all that up when the lease was lost).
func (n *Node) doFor(incarnation string, fn func()) {
	n.do(func() {
		if n.reg.incarnation == incarnation {
			fn()
		}
	})
}

// Takeover retries: a takeover whose first step, taking the producer's
// record, failed for a moment (etcd electing a leader) is tried again for
// up to takeoverRetryFor, every takeoverRetryPause, while its session still
// waits for it; only then are the producer's held frames refused. Refusing
// at once made clients move to another node, whose takeover made this one
// give the producer up (not held), and back: the producer went back and
// forth for as long as etcd was electing. A takeover that took the record
// is not retried: a retry could take it back from a newer owner, or throw
// away a state already handed over.
const (
	takeoverRetryFor   = 5 * time.Second
	takeoverRetryPause = 200 * time.Millisecond
)

// finalTakeoverError marks a takeover outcome that a retry cannot change
// (a fenced or unknown epoch, a producer that moved on to another owner).
type finalTakeoverError struct{ error }

func (e finalTakeoverError) Unwrap() error { return e.error }

// takeover makes incarnation the producer's owner if the epoch asked is
// current, has the previous owner hand it over (or fences it, and then
// rebuilds the producer's state from the ledgers: DESIGN.md §6), retrying
// what failed for a moment; the machine decides what the outcome means.
func (n *Node) takeover(t coordinator.Takeover, incarnation string) {
	start := time.Now()
	for {
		result, took := n.takeoverOnce(t, incarnation, start)
		var final finalTakeoverError
		if result.Err == nil || took || errors.As(result.Err, &final) || time.Since(start) > takeoverRetryFor ||
			!n.sleep(takeoverRetryPause) || !n.sessionWaits(t, incarnation) {
			if result.Err != nil {
				n.logger.Info("ingest: takeover failed", "producer", t.Producer, "took", time.Since(start).Round(time.Millisecond), "err", result.Err)
			}
			n.doFor(incarnation, func() { n.machine.TakeoverDone(result) })
			return
		}
		n.logger.Debug("ingest: takeover failed; retrying", "producer", t.Producer, "err", result.Err)
	}
}

// sessionWaits reports whether incarnation is still the node's and the
// session that asked for the takeover still waits for it.
func (n *Node) sessionWaits(t coordinator.Takeover, incarnation string) bool {
	waits := make(chan bool, 1)
	if !n.do(func() { waits <- n.reg.incarnation == incarnation && n.machine.SessionWaits(t.Producer, t.Session) }) {
		return false
	}
	select {
	case w := <-waits:
		return w
	case <-n.done: // the loop stopped before it ran the check
		return false
	}
}

// takeoverOnce is one attempt of takeover; took says whether it took the
// producer's record (then it is not retried).
func (n *Node) takeoverOnce(t coordinator.Takeover, incarnation string, start time.Time) (_ coordinator.TakeoverResult, took bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	result := coordinator.TakeoverResult{Producer: t.Producer, Epoch: t.Epoch, Session: t.Session}
	rec, previousOwner, err := takeOwnership(ctx, n.etcd, t.Producer, t.Epoch, incarnation)
	took = err == nil
	result.Current, result.OwnerGen = rec.Epoch, rec.Gen
	switch {
	case err != nil:
	case rec.Epoch != t.Epoch:
		err = finalTakeoverError{coordinator.StaleEpochError(t.Producer, t.Epoch, rec.Epoch)}
	case rec.Expired:
		err = finalTakeoverError{coordinator.ExpiredError(t.Producer)}
	}
	var released *producer.State
	if err == nil {
		var holders []string
		if holders, err = n.holders(ctx, previousOwner, rec.StateLedger); err == nil {
			released, err = n.handOver(ctx, t.Producer, holders, incarnation)
		}
	}
	switch {
	case err != nil:
	case released != nil:
		result.State = *released
	default:
		result.State, err = rebuildProducer(ctx, n.etcd, n.stores, &n.silent, t.Producer, rec.StateLedger, n.cfg.DedupWindow,
			coordinator.IsBucketName(rec.Name))
	}
	if err == nil {
		err = n.settledEpoch(ctx, &result, rec)
	}
	if errors.Is(err, errUnknownProducer) {
		err = finalTakeoverError{apierr.New(apierr.UnknownProducer, "producer %d is not registered: call InitProducer", t.Producer)}
	} else if err != nil && apierr.As(err).Code == apierr.Internal {
		err = apierr.New(apierr.Unavailable, "take over producer %d: %v", t.Producer, err)
	}
	result.Err = err
	if err == nil {
		n.ownerChanged(rec, previousOwner, incarnation, start)
	}
	return result, took
}

// settledEpoch reads the producer record again once the previous owner can
// log nothing more for the producer, and settles the state at its epoch
// (never below the state's own). An InitProducer at the previous owner
// between this takeover's first read and the handover raised the epoch
// and was answered there; the older instance's frames must stay fenced
// here, whether the state was released (it carries the new epoch) or
// rebuilt from the ledgers (which may not). A record that moved on to
// another owner meanwhile fails the takeover.
func (n *Node) settledEpoch(ctx context.Context, result *coordinator.TakeoverResult, took producerRecord) error {
	cur, _, err := getProducer(ctx, n.etcd, result.Producer)
	if err != nil {
		return apierr.New(apierr.Unavailable, "read producer %d after its handover: %v", result.Producer, err)
	}
	if cur.Owner != took.Owner || cur.Gen != took.Gen {
		return finalTakeoverError{apierr.New(apierr.Unavailable, "producer %d moved to %s during its takeover: retry", result.Producer, cur.Owner)}
	}
	result.Current = cur.Epoch
	result.State.Epoch = max(result.State.Epoch, cur.Epoch)
	return nil
}

// ownerChanged fires ProducerTakeover when etcd's owner record moved to
// this node (an InitProducer or a takeover by frame), not when it already
// named it.
func (n *Node) ownerChanged(rec producerRecord, previousOwner, incarnation string, start time.Time) {
	if previousOwner != incarnation {
		n.events.ProducerTakeover(event.TakeoverInfo{Producer: rec.ID, Name: rec.Name, FromOwner: previousOwner,
			ToOwner: incarnation, Duration: time.Since(start)})
	}
}

// recordState records a ledger holding a confirmed snapshot of the
// producer's state in its etcd record, if incarnation still owns it.
func (n *Node) recordState(r coordinator.StateRecord, incarnation string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := recordStateLedger(ctx, n.etcd, r.Producer, incarnation, r.OwnerGen, r.Ledger)
	if errors.Is(err, errNotOwner) {
		// Taken over elsewhere while this node settled it: the client's
		// instance is not fenced (only a newer epoch fences it), it only
		// has to go on at the new owner.
		err = apierr.New(apierr.Unavailable, "producer %d moved to another node: retry there", r.Producer)
	} else if err != nil {
		err = apierr.New(apierr.Unavailable, "record producer %d state: %v", r.Producer, err)
	}
	n.doFor(incarnation, func() { n.machine.StateRecorded(r.Producer, r.Session, err) })
}

// registerBucket registers an idempotency bucket's producer (a new epoch);
// the takeover that follows hands it over from its owner.
func (n *Node) registerBucket(index int, incarnation string) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rec, previous, err := registerProducer(ctx, n.etcd, coordinator.BucketName(index), incarnation)
	if err == nil && rec.Owner == incarnation {
		n.ownerChanged(rec, previous.Owner, incarnation, start)
	}
	n.doFor(incarnation, func() {
		if err != nil {
			n.machine.BucketRegistrationFailed(index, apierr.New(apierr.Unavailable, "register producer: %v", err))
			return
		}
		n.machine.BucketRegistered(index, rec.ID, rec.Epoch)
	})
}
