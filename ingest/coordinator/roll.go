package coordinator

import (
	"cmp"
	"slices"
	"time"

	"orderlog/ingest/pipeline"
	"orderlog/ingest/producer"
	"orderlog/internal/apierr"
)

// Ledger rolling (DESIGN.md §6): the owner asks for a roll when the open
// ledger is large or old enough. The pipeline opens the next ledger while
// the current one keeps taking batches and switches once the current one is
// drained (pipeline/roll.go). At the switch the machine writes a snapshot
// of every settled producer as the new ledger's first entry after entry 0,
// taken after the old ledger's last batches were logged, and once it is
// confirmed asks for the ready producers' state ledger to move to the new
// ledger (AdvanceStates): a later takeover then reads this ledger and the
// ones after it, not the whole history. Producers idle longer than the
// expiry are left out of that snapshot and expired (ExpireProducers).

// Roll asks for the open ledger to be replaced; false if there is none
// open or a roll is under way already.
func (m *Machine) Roll(reason string) bool {
	if m.ledger.id == 0 || !m.pipe.Roll() {
		return false
	}
	m.ledger.rollReason = reason
	return true
}

// RollLedger is the roll's next ledger while it waits for the switch (0:
// none).
func (m *Machine) RollLedger() uint64 { return m.ledger.next }

// Tick gives the machine the time, for producer idleness (no decision of
// order or durability reads it).
func (m *Machine) Tick(now time.Time) { m.now = now }

// StateAdvance asks for Ledger to become the state ledger of each of
// Producers whose record this node still owns at the given ownership
// generation (a compare-and-swap each; a producer that moved is left
// alone). Best effort: a producer left behind only rebuilds from further
// back.
type StateAdvance struct {
	Ledger    uint64
	Producers []OwnedProducer
}

// OwnedProducer names a producer record at an ownership generation.
type OwnedProducer struct{ Producer, OwnerGen, Session uint64 }

// pendingAdvance is the switch snapshot waiting to be confirmed.
type pendingAdvance struct {
	ledger    uint64
	entry     int64
	producers []OwnedProducer
}

// switched installs the roll's next ledger as the open one.
func (m *Machine) switched(s *pipeline.Switch) {
	if m.ledger.id != s.New { // from the draining ledger; after a close LedgerOpened installed it
		m.ledger.id, m.ledger.nextEntry = s.New, 1
	}
	if !s.Closed {
		m.ready.CloseLedgers = append(m.ready.CloseLedgers, s.Old)
	}
	m.expireIdle()
	snapshot, advance := m.switchSnapshot()
	entry := m.appendEntry(Append{Snapshot: snapshot})
	for _, id := range sortedIDs(m.producers, func(s *session) bool { return s.settled && s.snapshotEntry == snapshotInNextLedger }) {
		m.producers[id].snapshotLedger, m.producers[id].snapshotEntry = s.New, entry
	}
	m.ledger.advance = &pendingAdvance{ledger: s.New, entry: entry, producers: advance}
	if lac := m.ledger.nextLAC; m.ledger.next == s.New && lac >= 0 {
		m.pipe.Confirmed(s.New, lac)
		m.snapshotsDurable(s.New, lac)
	}
	m.ledger.next, m.ledger.nextLAC = 0, -1
}

// switchSnapshot is every settled, unexpired producer's state, and the
// ready ones among them whose state ledger can move to the new ledger.
func (m *Machine) switchSnapshot() ([]producer.State, []OwnedProducer) {
	var states []producer.State
	for _, st := range m.table.Snapshot() {
		if s, ok := m.producers[st.ID]; !ok || !s.expiring {
			states = append(states, st)
		}
	}
	states = m.withKeys(states)
	slices.SortFunc(states, func(a, b producer.State) int { return cmp.Compare(a.ID, b.ID) })
	var advance []OwnedProducer
	for _, id := range sortedIDs(m.producers, func(s *session) bool { return s.ready && !s.expiring && !s.releasing && s.ownerGen != 0 }) {
		advance = append(advance, OwnedProducer{Producer: id, OwnerGen: m.producers[id].ownerGen, Session: m.producers[id].gen})
	}
	return states, advance
}

// advanceIfDurable hands out the pending advance once its snapshot entry is
// confirmed.
func (m *Machine) advanceIfDurable(ledger uint64, lac int64) {
	a := m.ledger.advance
	if a == nil || a.ledger != ledger || a.entry > lac {
		return
	}
	m.ledger.advance = nil
	if len(a.producers) > 0 {
		m.ready.AdvanceStates = append(m.ready.AdvanceStates, StateAdvance{Ledger: a.ledger, Producers: a.producers})
	}
}

// expireIdle marks the ready producers idle for longer than the expiry,
// with nothing in flight, for expiry: their records are marked expired in
// etcd (ExpireProducers) and the sessions dropped once that is done.
func (m *Machine) expireIdle() {
	if m.cfg.ProducerExpiry <= 0 || m.now.IsZero() {
		return
	}
	for _, id := range sortedIDs(m.producers, func(s *session) bool {
		return s.ready && !s.keyed && !s.expiring && !s.releasing && !s.lastActive.IsZero() && m.now.Sub(s.lastActive) > m.cfg.ProducerExpiry
	}) {
		if m.table.InFlight(id) > 0 {
			continue
		}
		s := m.producers[id]
		s.expiring, s.ready = true, false // frames wait for the outcome
		m.ready.ExpireProducers = append(m.ready.ExpireProducers, OwnedProducer{Producer: id, OwnerGen: s.ownerGen, Session: s.gen})
	}
}

// ProducerExpired: an ExpireProducers write finished. On success the
// session is dropped and its waiting frames refused with PRODUCER_EXPIRED;
// otherwise it goes on as before (it was left out of one snapshot, so its
// state ledger did not move).
func (m *Machine) ProducerExpired(id, session uint64, err error) {
	s, ok := m.producers[id]
	if !ok || s.gen != session || !s.expiring {
		return
	}
	if err == nil {
		m.dropSession(id, ExpiredError(id))
		return
	}
	s.expiring, s.ready = false, true
	held := s.held
	s.held = nil
	for _, f := range held {
		m.produceOwned(f)
	}
}

// ExpiredError is the refusal of a producer whose record expired.
func ExpiredError(id uint64) error {
	return apierr.New(apierr.ProducerExpired, "producer %d expired after being idle: call InitProducer again", id)
}
