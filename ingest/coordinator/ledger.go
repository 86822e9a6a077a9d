package coordinator

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"orderlog/ingest/producer"
)

// RetryPause is the pause before retrying a failed etcd or ledger
// operation.
const RetryPause = 200 * time.Millisecond

// RefusalPause is how long a new ledger waits after refusedInARow refused
// grants: none after none, then RetryPause doubling up to 2 s. While no
// sequencer grants (none is up) every refusal closes
// the ledger, and reopening at once created hundreds of ledgers a second,
// each with its etcd records and producer snapshot.
func RefusalPause(refusedInARow int) time.Duration {
	if refusedInARow == 0 {
		return 0
	}
	return min(RetryPause<<min(refusedInARow-1, 4), 2*time.Second)
}

// askForLedger asks the owner for a ledger whose entry 0 is a snapshot of
// the producer table (DESIGN.md §6).
func (m *Machine) askForLedger() {
	snapshot := m.withKeys(m.table.Snapshot())
	slices.SortFunc(snapshot, func(a, b producer.State) int { return cmp.Compare(a.ID, b.ID) })
	m.ledger.inEntry0 = make(map[uint64]bool, len(snapshot))
	for _, st := range snapshot {
		m.ledger.inEntry0[st.ID] = true
	}
	reason := "the node's first ledger"
	switch {
	case m.pipe.Rolling():
		reason = fmt.Sprintf("roll of L%d: %s", m.ledger.id, m.ledger.rollReason)
	case m.refusedInARow > 0:
		reason = fmt.Sprintf("L%d closed on a refused grant (%d in a row)", m.ledger.lastClosed, m.refusedInARow)
	case m.ledger.lastClosed != 0:
		reason = fmt.Sprintf("L%d closed", m.ledger.lastClosed)
	}
	m.ready.OpenLedger = &OpenLedger{Snapshot: snapshot, Pause: RefusalPause(m.refusedInARow), Reason: reason, Roll: m.pipe.Rolling()}
}

// LedgerOpened: the ledger asked for by OpenLedger is open, its entry 0
// holding the snapshot, and every entry ≤ lac is confirmed. A producer
// waiting for a durable snapshot has it in entry 0 if it was settled when
// the snapshot was taken; one settled since gets an entry of its own.
func (m *Machine) LedgerOpened(id uint64, lac int64) {
	m.pipe.LedgerOpened(id)
	if m.pipe.Next() == id { // a roll's: it takes entries at the switch
		m.ledger.next, m.ledger.nextLAC, m.ledger.inEntry0 = id, lac, nil
		return
	}
	m.ledger.id, m.ledger.nextEntry = id, 1
	inEntry0 := m.ledger.inEntry0
	m.ledger.inEntry0 = nil
	for _, pid := range sortedIDs(m.producers, func(s *session) bool { return s.settled && s.snapshotEntry == snapshotInNextLedger }) {
		s := m.producers[pid]
		if inEntry0[pid] {
			s.snapshotLedger, s.snapshotEntry = id, 0
			continue
		}
		m.writeSnapshot(pid, s)
	}
	// Entry 0 may have been confirmed before the owner reported the open,
	// and a writer reports a LAC once.
	m.snapshotsDurable(id, lac)
}

// LedgerOpenFailed: creating the ledger failed; it is asked for again.
func (m *Machine) LedgerOpenFailed() {
	m.ledger.inEntry0 = nil
	m.pipe.LedgerOpenFailed()
}

// Confirmed: every entry ≤ lac of ledger is confirmed at the ack quorum.
func (m *Machine) Confirmed(ledger uint64, lac int64) {
	if ledger != 0 && m.ledger.next == ledger {
		m.ledger.nextLAC = lac
		return
	}
	if m.ledger.id != ledger {
		return // a failing ledger: LedgerClosed decides its entries
	}
	m.pipe.Confirmed(ledger, lac)
	m.snapshotsDurable(ledger, lac)
	m.advanceIfDurable(ledger, lac)
}

// LocallyDurable: the writer's own store fsynced every entry ≤ entry of
// ledger (ack mode leader).
func (m *Machine) LocallyDurable(ledger uint64, entry int64) {
	if m.ledger.id == ledger {
		m.pipe.LocallyDurable(ledger, entry)
	}
}

// LedgerFailed: the open ledger cannot take more writes (an append failed,
// the writer lost its quorum, or the sequencer asked for it to be closed).
// It is closed at its LAC (DESIGN.md §3 step 6) and everything beyond the
// last entry read back is granted again into a new ledger. Any other ledger
// is being closed already: nothing to do.
func (m *Machine) LedgerFailed(ledger uint64) {
	if ledger != 0 && m.ledger.next == ledger { // the roll's: the open ledger goes on
		m.ledger.next, m.ledger.nextLAC = 0, -1
		m.pipe.LedgerFailing(ledger)
		m.ready.CloseLedgers = append(m.ready.CloseLedgers, ledger)
		return
	}
	if m.ledger.id == 0 || m.ledger.id != ledger {
		return
	}
	m.ledger.id = 0
	m.pipe.LedgerFailing(ledger)
	m.ready.CloseLedgers = append(m.ready.CloseLedgers, ledger)
}

// LedgerClosed: ledger is closed with last as its last entry. Its entries
// ≤ last are logged, the rest re-granted, and producers whose snapshot was
// beyond last get one in the next ledger.
func (m *Machine) LedgerClosed(ledger uint64, last int64) {
	m.ready.LedgersClosed = append(m.ready.LedgersClosed, ledger)
	m.ledger.lastClosed = ledger
	m.pipe.LedgerClosed(ledger, last)
	m.snapshotsDurable(ledger, last)
	m.advanceIfDurable(ledger, last)
	if m.ledger.advance != nil && m.ledger.advance.ledger == ledger {
		m.ledger.advance = nil // closed without its snapshot
	}
	for _, id := range sortedIDs(m.producers, func(s *session) bool {
		return s.settled && s.snapshotLedger == ledger && s.snapshotEntry > last
	}) {
		m.writeSnapshot(id, m.producers[id]) // in the open ledger, or entry 0 of the next
	}
}

// Granted: the sequencer granted batchID offsets from first.
func (m *Machine) Granted(batchID, first uint64) {
	m.refusedInARow = 0
	if err := m.pipe.Granted(batchID, first); err != nil {
		panic("coordinator: " + err.Error()) // grants answer requests in order: a bug
	}
}

// GrantRefused: the sequencer refused batchID's grant for ledger, which can
// take no more grants: it is closed and another one opened.
func (m *Machine) GrantRefused(batchID, ledger uint64) {
	m.pipe.GrantRefused(batchID)
	m.refusedInARow++
	m.LedgerFailed(ledger)
}
