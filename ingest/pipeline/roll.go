package pipeline

// A roll replaces the open ledger without stopping the write path
// (DESIGN.md §6, "ledger rolling"): the next ledger is opened while the
// current one keeps taking batches; once it is open, nothing more is sealed
// into the current one, and when the current one's last batch is logged
// (drained) the pipeline switches, so the old ledger is closed with every
// entry confirmed and no offset of it becomes a hole. No batch is sealed
// into the next ledger before the switch: if the current ledger fails while
// it drains, its unconfirmed batches are granted again ahead of everything
// sealed after them, as after any failure, and producer order holds.

// Switch reports that batches now go to New; Old (if not yet closed: Closed
// false) has every batch logged and is to be closed.
type Switch struct {
	Old, New uint64
	// Closed: Old failed while the roll was under way and is closed
	// already.
	Closed bool
}

// Roll asks for the next ledger while the open one keeps taking batches;
// false if no ledger is open or a roll is under way already.
func (p *Pipeline) Roll() bool {
	if p.state != ledgerOpen || p.rolling || p.next != 0 {
		return false
	}
	p.rolling, p.rollFrom = true, p.ledger
	p.ready.NeedLedger = true
	return true
}

// Rolling reports whether a roll waits for its next ledger to open (so
// LedgerOpened names the next ledger, not a replacement of a failed one).
func (p *Pipeline) Rolling() bool { return p.rolling }

// Next is the ledger a roll opened and the pipeline switches to once the
// current one drains (0: none).
func (p *Pipeline) Next() uint64 { return p.next }

// rollOpened: the roll's ledger is open. Sealing into the current ledger
// stops; if the current one failed and closed meanwhile, the new one
// takes its place at once (while it fails, only after its close: its
// unconfirmed batches are granted again first).
func (p *Pipeline) rollOpened(ledger uint64) {
	p.rolling = false
	if p.state != ledgerOpening { // open, or failing: it switches after the drain or the close
		p.next = ledger
		return
	}
	p.ledger, p.state, p.wantLedger = ledger, ledgerOpen, false
	p.ready.Switched = &Switch{Old: p.rollFrom, New: ledger, Closed: true}
}

// switchIfDrained moves to the next ledger once the current one has no
// batch in flight.
func (p *Pipeline) switchIfDrained() {
	if p.next == 0 || p.state != ledgerOpen {
		return
	}
	for _, b := range p.inFlight {
		if b.Ledger == p.ledger {
			return
		}
	}
	p.ready.Switched = &Switch{Old: p.ledger, New: p.next}
	p.ledger, p.next = p.next, 0
}

// switchAfterClose moves to the next ledger when the current one closed
// (it failed during the roll): the next ledger takes the batches granted
// again, as a new ledger would.
func (p *Pipeline) switchAfterClose(closed uint64) {
	if p.next == 0 {
		return
	}
	p.ready.Switched = &Switch{Old: closed, New: p.next, Closed: true}
	p.ledger, p.state, p.next = p.next, ledgerOpen, 0
}
