package coordinator

import (
	"cmp"
	"slices"

	"orderlog/ingest/producer"
)

// OwnershipLost: the node's etcd lease is gone (it expired, or a node that
// took one of its producers over revoked it). Other nodes may now own any
// of its producers and fence its ledgers, and it can create no ledger, so
// it must log nothing more for them (DESIGN.md §6). Every frame not yet
// answered is refused with err (its client retries; a message that was
// logged after all is then a duplicate with its offset), every session,
// bucket and InitProducer is dropped, and the open ledger is forgotten: the
// owner closes it (as the old incarnation: its outcome is not reported
// back). The node goes on under a new incarnation, and producers come back through
// takeovers that rebuild their state from the ledgers.
func (m *Machine) OwnershipLost(err error) {
	for _, msg := range m.pipe.Abandon() {
		f := msg.Payload.(*MessageRef).Frame
		f.unlogged--
		m.refuse(f, err)
		m.releaseIfDone(f)
	}
	for _, id := range sortedIDs(m.producers, func(*session) bool { return true }) {
		m.dropSession(id, err)
	}
	waiting := make([]seqKey, 0, len(m.dupWaiters))
	for k := range m.dupWaiters {
		waiting = append(waiting, k)
	}
	slices.SortFunc(waiting, func(a, b seqKey) int { return cmp.Or(cmp.Compare(a.producer, b.producer), cmp.Compare(a.seq, b.seq)) })
	for _, k := range waiting {
		for _, w := range m.dupWaiters[k] {
			m.refuse(w.frame, err)
		}
	}
	for _, b := range m.buckets {
		if b != nil {
			for _, f := range b.held {
				m.refuse(f, err)
			}
		}
	}
	for _, p := range m.inits { // none should be left: every init has a session
		m.initDone(p, nil, err)
	}
	m.inits = nil
	m.dupWaiters = make(map[seqKey][]ackTarget)
	m.buckets = [IdempotencyBuckets]*keyBucket{}
	m.bucketOf = make(map[uint64]*keyBucket)
	m.table = producer.NewTable(m.cfg.DedupWindow)
	m.ledger = openLedger{lastClosed: m.ledger.lastClosed, nextLAC: -1} // the owner closes it as the old incarnation
	m.refusedInARow = 0
}
