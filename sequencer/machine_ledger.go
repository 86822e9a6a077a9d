package sequencer

import "time"

type ledgerState uint8

const (
	ledgerOpen       ledgerState = iota
	ledgerClosing                // the writer was asked to close at its LAC
	ledgerRecovering             // recovery through the ledger client was requested
	ledgerClosed
)

type ledgerInfo struct {
	LedgerRef
	state ledgerState
	since time.Duration // when closing started
}

// startClose asks the writer to close l at its LAC; CloseTimeout later the
// ledger is recovered instead (Tick).
func (m *Machine) startClose(l *ledgerInfo) {
	if l.state != ledgerOpen {
		return
	}
	l.state = ledgerClosing
	l.since = m.now
	m.closing[l.ID] = l
	var sess SessionID
	if id, ok := m.current[l.Writer]; ok && m.alive(id) {
		sess = id
	}
	m.out.Closes = append(m.out.Closes, CloseRequest{Ledger: l.ID, Writer: l.Writer, Session: sess})
}

func (m *Machine) expireCloses() {
	for id, l := range m.closing {
		if m.now-l.since >= m.cfg.CloseTimeout {
			delete(m.closing, id)
			l.state = ledgerRecovering
			m.out.Recovers = append(m.out.Recovers, id)
		}
	}
}

// LedgerClosed reports that a ledger is closed (by its writer or by a
// recovery) with the spans of its entries ≤ last. Offsets granted to it in
// those spans become Written; every other offset granted to it becomes a
// Hole (invariant H). For an older-epoch ledger during takeover, the
// remaining older offsets become holes once every older ledger is closed.
func (m *Machine) LedgerClosed(now time.Duration, id uint64, spans []EntrySpan) {
	m.Tick(now)
	l := m.ledgers[id]
	if l == nil || l.state == ledgerClosed {
		return
	}
	older := l.Epoch < m.cfg.Epoch
	delete(m.closing, id)
	l.state = ledgerClosed
	m.applyClosedSpans(id, spans, older)
	if !older {
		m.holeRest(id)
	} else if m.olderPending--; m.olderPending == 0 {
		m.holeRest(0)
	}
	m.advance()
	m.checkTakeover()
	m.drain()
}

// LedgerUnclosed reports whether the machine knows ledger id and has not
// closed it: only then can a close decide anything.
func (m *Machine) LedgerUnclosed(id uint64) bool {
	l := m.ledgers[id]
	return l != nil && l.state != ledgerClosed
}

// LedgerSettled reports whether every offset granted to ledger id, a
// ledger of this epoch written by writer, is already decided (by its
// writer's Written and Unused reports). A close of such a ledger decides
// nothing more whatever its spans, so it needs no read-back of the entries.
// Older-epoch ledgers never qualify: their undecided offsets are not
// tagged with them.
func (m *Machine) LedgerSettled(id uint64, writer string) bool {
	l := m.ledgers[id]
	if l == nil || l.state == ledgerClosed || l.Epoch != m.cfg.Epoch || l.Writer != writer {
		return false
	}
	for _, s := range m.segs.live() {
		if !s.resolved() && s.ledger == id {
			return false
		}
	}
	return true
}

// applyClosedSpans marks the spans of a closed ledger Written. Spans below
// the resolved prefix were decided before and are skipped.
func (m *Machine) applyClosedSpans(id uint64, spans []EntrySpan, older bool) {
	for _, sp := range spans {
		r := sp.Range.Intersect(Range{m.resolvedEnd, m.nextOffset})
		if r.Empty() {
			continue
		}
		m.resolve(r, segWritten, id, sp.Entry, older)
	}
}

// holeRest turns every still-granted offset of ledger id into a hole (id 0:
// every older-epoch offset). Callers have made sure that ledger is closed
// (every older ledger, for 0) and its spans applied: invariant H.
func (m *Machine) holeRest(id uint64) {
	for _, s := range m.segs.live() {
		if !s.resolved() && s.ledger == id {
			m.resolve(s.Range, segHole, id, 0, id == 0)
		}
	}
}
