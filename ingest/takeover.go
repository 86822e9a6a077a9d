package ingest

import (
	"context"
	"errors"
	"time"

	"orderlog/ingest/coordinator"
	"orderlog/internal/apierr"
	"orderlog/internal/event"
)

// takeover makes this node the producer's owner if the epoch asked is
// current, and rebuilds its state from the ledgers (DESIGN.md §6); the
// machine decides what the outcome means.
func (n *Node) takeover(t coordinator.Takeover) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	result := coordinator.TakeoverResult{Producer: t.Producer, Epoch: t.Epoch}
	rec, previousOwner, err := takeOwnership(ctx, n.etcd, t.Producer, t.Epoch, n.incarnation)
	result.Current = rec.Epoch
	if err == nil && rec.Epoch != t.Epoch {
		err = coordinator.StaleEpochError(t.Producer, t.Epoch, rec.Epoch)
	}
	if err == nil {
		result.State, err = rebuildProducer(ctx, n.etcd, n.stores, t.Producer, rec.StateLedger, n.cfg.DedupWindow)
		result.State.Epoch = rec.Epoch
	}
	if errors.Is(err, errUnknownProducer) {
		err = apierr.New(apierr.UnknownProducer, "producer %d is not registered: call InitProducer", t.Producer)
	} else if err != nil && apierr.As(err).Code == apierr.Internal {
		err = apierr.New(apierr.Unavailable, "take over producer %d: %v", t.Producer, err)
	}
	result.Err = err
	if err == nil {
		n.ownerChanged(rec, previousOwner, start)
	}
	n.do(func() { n.machine.TakeoverDone(result) })
}

// ownerChanged fires ProducerTakeover when etcd's owner record moved to
// this node (an InitProducer or a takeover by frame), not when it already
// named it.
func (n *Node) ownerChanged(rec producerRecord, previousOwner string, start time.Time) {
	if previousOwner != n.incarnation {
		n.events.ProducerTakeover(event.TakeoverInfo{Producer: rec.ID, Name: rec.Name, FromOwner: previousOwner,
			ToOwner: n.incarnation, Duration: time.Since(start)})
	}
}

// recordState records a ledger holding a confirmed snapshot of the
// producer's state in its etcd record, if this node still owns it.
func (n *Node) recordState(r coordinator.StateRecord) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := recordStateLedger(ctx, n.etcd, r.Producer, n.incarnation, r.Ledger)
	if errors.Is(err, errNotOwner) {
		err = apierr.New(apierr.ProducerFenced, "producer %d moved to another node", r.Producer)
	} else if err != nil {
		err = apierr.New(apierr.Unavailable, "record producer %d state: %v", r.Producer, err)
	}
	n.do(func() { n.machine.StateRecorded(r.Producer, err) })
}

// registerBucket registers an idempotency bucket's producer with this node
// as its owner.
func (n *Node) registerBucket(index int) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	rec, previous, err := registerProducer(ctx, n.etcd, coordinator.BucketName(index), n.incarnation)
	if err == nil {
		n.ownerChanged(rec, previous.Owner, start)
	}
	n.do(func() {
		if err != nil {
			n.machine.BucketRegistrationFailed(index, apierr.New(apierr.Unavailable, "register producer: %v", err))
			return
		}
		n.machine.BucketRegistered(index, rec.ID, rec.Epoch)
	})
}
