package ingest

import (
	"context"
	"errors"
	"time"

	"orderlog/ingest/batch"
	"orderlog/ingest/producer"
	"orderlog/internal/apierr"
)

// snapshotInNextLedger marks a producer whose state snapshot will be entry
// 0 of the next ledger this node opens.
const snapshotInNextLedger = -1

// producerSession is a producer this node owns or is taking over. Owned by
// the loop goroutine.
//
// Invariant: frames of a producer are processed only once ready, which is
// after its state was rebuilt, a snapshot of that state was confirmed in one
// of this node's ledgers, and that ledger was recorded in the producer's
// etcd record — so the next owner rebuilds from a state that includes every
// message this node logs for it.
type producerSession struct {
	// epoch is the highest epoch InitProducer gave the producer while the
	// session was settling; settle fences the table at it.
	epoch          uint64
	settled        bool     // state rebuilt and in the table
	keyed          bool     // an idempotency-key bucket
	keys           []string // its rebuilt keys, aligned with the window
	ready          bool
	held           []*frame
	onReady        []func(error)
	snapshotLedger uint64
	snapshotEntry  int64
	recording      bool
}

// session returns the producer's session, starting a takeover at epoch if
// the node does not own the producer yet.
func (n *Node) session(id, epoch uint64) *producerSession {
	s, ok := n.producers[id]
	if !ok {
		s = &producerSession{snapshotEntry: snapshotInNextLedger}
		n.producers[id] = s
		n.async(func() { n.takeover(id, epoch) })
	}
	return s
}

// takeover makes this node the producer's owner if epoch is current, and
// rebuilds its state from the ledgers (DESIGN.md §6).
func (n *Node) takeover(id, epoch uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rec, err := takeOwnership(ctx, n.etcd, id, epoch, n.incarnation)
	current := rec.Epoch
	if err == nil && rec.Epoch != epoch {
		err = staleEpochError(id, epoch, rec.Epoch)
	}
	var state producer.State
	if err == nil {
		state, err = rebuildProducer(ctx, n.etcd, n.stores, id, rec.StateLedger, n.cfg.DedupWindow)
		state.Epoch = rec.Epoch
	}
	if errors.Is(err, errUnknownProducer) {
		err = apierr.New(apierr.UnknownProducer, "producer %d is not registered: call InitProducer", id)
	} else if err != nil && apierr.As(err).Code == apierr.Internal {
		err = apierr.New(apierr.Unavailable, "take over producer %d: %v", id, err)
	}
	n.do(func() {
		if s, ok := n.producers[id]; ok && err != nil && s.epoch > epoch && s.epoch >= current {
			// An InitProducer raised the epoch while this takeover ran for
			// an older instance's frame: take over at the new epoch. The
			// held frames are judged against it once the state is settled
			// (the older instance's are fenced then), and the new instance
			// is not told it is fenced.
			newer := s.epoch
			n.async(func() { n.takeover(id, newer) })
			return
		}
		if err != nil {
			n.dropSession(id, err)
			return
		}
		n.settle(id, state)
	})
}

func staleEpochError(id, asked, current uint64) error {
	if asked < current {
		return apierr.New(apierr.ProducerFenced, "producer %d epoch %d is fenced by epoch %d", id, asked, current)
	}
	return apierr.New(apierr.UnknownProducer, "producer %d has no epoch %d (current %d): call InitProducer", id, asked, current)
}

// settle installs a rebuilt state and makes it durable in this node's own
// ledger: appended now as a one-producer snapshot entry if a ledger is
// open, else as part of entry 0 of the next one.
func (n *Node) settle(id uint64, state producer.State) {
	s, ok := n.producers[id]
	if !ok {
		return
	}
	state.Epoch = max(state.Epoch, s.epoch)
	n.table.Register(state)
	s.settled = true
	if s.keyed {
		s.keys = state.Keys
	}
	n.writeSnapshot(id, s)
}

// writeSnapshot appends a one-producer snapshot entry to the open ledger,
// or, without one, leaves the snapshot to entry 0 of the next ledger.
func (n *Node) writeSnapshot(id uint64, s *producerSession) {
	if n.writer != nil {
		state, _ := n.table.Get(id)
		if payload, err := batch.EncodeSnapshot(nil, time.Now().UnixMicro(), n.withKeys([]producer.State{state})); err == nil {
			if entry, err := n.writer.Append(payload, spanNone); err == nil {
				s.snapshotLedger, s.snapshotEntry = n.writer.ID(), entry
				return
			}
		}
		n.failLedger()
	}
	s.snapshotLedger, s.snapshotEntry = 0, snapshotInNextLedger
	n.pipe.WantLedger()
}

// snapshotsDurable records, for every producer whose snapshot entry in
// ledgerID is now durable (≤ through), that ledger in its etcd record.
func (n *Node) snapshotsDurable(ledgerID uint64, through int64) {
	for id, s := range n.producers {
		if !s.settled || s.ready || s.recording || s.snapshotLedger != ledgerID || s.snapshotEntry < 0 || s.snapshotEntry > through {
			continue
		}
		s.recording = true
		id := id
		n.async(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err := recordStateLedger(ctx, n.etcd, id, n.incarnation, ledgerID)
			n.do(func() { n.sessionRecorded(id, err) })
		})
	}
}

func (n *Node) sessionRecorded(id uint64, err error) {
	s, ok := n.producers[id]
	if !ok {
		return
	}
	s.recording = false
	if err != nil {
		if errors.Is(err, errNotOwner) {
			err = apierr.New(apierr.ProducerFenced, "producer %d moved to another node", id)
		} else {
			err = apierr.New(apierr.Unavailable, "record producer %d state: %v", id, err)
		}
		n.dropSession(id, err)
		return
	}
	s.ready = true
	for _, fn := range s.onReady {
		fn(nil)
	}
	s.onReady = nil
	held := s.held
	s.held = nil
	for _, f := range held {
		n.produceOwned(f)
	}
}

// dropSession forgets a producer, refusing what waited for it.
func (n *Node) dropSession(id uint64, err error) {
	s, ok := n.producers[id]
	if !ok {
		return
	}
	delete(n.producers, id)
	n.table.Remove(id)
	for _, f := range s.held {
		f.refuse(err)
	}
	for _, fn := range s.onReady {
		fn(err)
	}
}
