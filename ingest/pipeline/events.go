package pipeline

import "fmt"

// LedgerOpened: the ledger asked for by NeedLedger is open for writing.
func (p *Pipeline) LedgerOpened(ledger uint64) {
	if p.rolling {
		p.rollOpened(ledger)
		return
	}
	p.ledger, p.state, p.wantLedger = ledger, ledgerOpen, false
}

// LedgerOpenFailed: opening a ledger failed; NeedLedger is asked again.
func (p *Pipeline) LedgerOpenFailed() {
	p.rolling = false // an open ledger goes on; a roll may be asked again
	if p.state == ledgerOpening {
		p.state = noLedger
	}
}

// Granted: the grant for batchID starts at first. A grant for a batch whose
// ledger already failed is reported Unused (no AddEntry was sent for it).
func (p *Pipeline) Granted(batchID, first uint64) error {
	if b, ok := p.orphans[batchID]; ok {
		delete(p.orphans, batchID)
		p.ready.Unused = append(p.ready.Unused, UnusedReport{Ledger: b.Ledger, Span: Span{first, first + uint64(len(b.Messages))}})
		return nil
	}
	b := p.find(batchID)
	if b == nil || b.granted {
		return fmt.Errorf("pipeline: grant for unknown or granted batch %d", batchID)
	}
	b.granted, b.First = true, first
	if p.state == ledgerOpen && b.Ledger == p.ledger && p.grantedPrefix(b) {
		p.queueAppends()
	}
	return nil
}

// GrantRefused: the sequencer refused the grant (the ledger is no longer
// valid for it). The ledger must be closed; the caller also calls
// LedgerFailing.
func (p *Pipeline) GrantRefused(batchID uint64) {
	delete(p.orphans, batchID)
	if b := p.find(batchID); b != nil {
		b.refused = true // no grant will come: not an orphan after the close
	}
}

// Appended: batchID was sent to the ledger as entry.
func (p *Pipeline) Appended(batchID uint64, entry int64) error {
	b := p.find(batchID)
	if b == nil || !b.granted || b.appended {
		return fmt.Errorf("pipeline: append of unknown, ungranted or appended batch %d", batchID)
	}
	b.appended, b.Entry = true, entry
	return nil
}

// Confirmed: every entry ≤ lac of ledger is confirmed at the ack quorum.
func (p *Pipeline) Confirmed(ledger uint64, lac int64) {
	for len(p.inFlight) > 0 {
		b := p.inFlight[0]
		if b.Ledger != ledger || !b.appended || b.Entry > lac {
			return
		}
		p.log(b)
		p.inFlight = p.inFlight[1:]
	}
}

// LocallyDurable: the writer's own store holds every entry ≤ entry of
// ledger (fsynced), whatever the ack quorum says. Batches in them not yet
// Acked or Logged are handed out in Ready.Acked, in order.
func (p *Pipeline) LocallyDurable(ledger uint64, entry int64) {
	if p.state != ledgerOpen || p.ledger != ledger {
		return // a failing ledger: its close decides
	}
	for _, b := range p.inFlight {
		if b.Ledger != ledger || !b.appended || b.Entry > entry {
			return
		}
		if !b.acked {
			b.acked = true
			p.ready.Acked = append(p.ready.Acked, b)
		}
	}
}

// LedgerFailing: the ledger cannot take more writes (quorum lost, fenced,
// grant refused, grant session lost). The caller closes it and reports
// LedgerClosed; until then nothing is sealed or appended.
func (p *Pipeline) LedgerFailing(ledger uint64) {
	if ledger == p.next {
		p.next = 0 // no batch went to it: the current ledger goes on
		return
	}
	if p.ledger == ledger && (p.state == ledgerOpen || p.state == ledgerOpening) {
		p.state = ledgerFailing
		p.ready.Appends = nil // not yet sent: they are re-granted after the close
	}
}

// LedgerClosed: ledger closed with last as its last entry. Batches in entries
// ≤ last are logged; the others go back to the front of the queue, in order,
// and a new ledger is asked for.
func (p *Pipeline) LedgerClosed(ledger uint64, last int64) {
	var requeue []Message
	var kept []*Batch
	for _, b := range p.inFlight {
		switch {
		case b.Ledger != ledger:
			kept = append(kept, b)
		case b.appended && b.Entry <= last:
			p.log(b)
		case b.granted && !b.appended:
			p.ready.Unused = append(p.ready.Unused, UnusedReport{Ledger: ledger, Span: b.Span()})
			requeue = append(requeue, b.Messages...)
		case !b.granted:
			if !b.refused {
				p.orphans[b.ID] = b // its grant, if it comes, is reported Unused
			}
			requeue = append(requeue, b.Messages...)
		default: // appended beyond last: a hole by invariant H, re-granted here
			requeue = append(requeue, b.Messages...)
		}
	}
	p.inFlight = kept
	p.waiting = append(requeue, p.waiting...)
	if p.ledger == ledger {
		p.ledger, p.state = 0, noLedger
		p.switchAfterClose(ledger)
		if p.rolling { // the roll's ledger, once open, replaces it
			p.state = ledgerOpening
		}
	}
}

func (p *Pipeline) log(b *Batch) {
	p.ready.Written = append(p.ready.Written, WrittenReport{Ledger: b.Ledger, Entry: b.Entry, Span: b.Span()})
	p.ready.Logged = append(p.ready.Logged, b)
}

// grantedPrefix reports whether b and every batch before it in its ledger
// are granted, so b can be appended without an entry out of offset order.
func (p *Pipeline) grantedPrefix(b *Batch) bool {
	for _, other := range p.inFlight {
		if other == b {
			return true
		}
		if other.Ledger == b.Ledger && !other.granted {
			return false
		}
	}
	return false
}

// queueAppends moves every granted, unsent batch at the front of the open
// ledger's batches to Ready.Appends, in order.
func (p *Pipeline) queueAppends() {
	for _, b := range p.inFlight {
		if b.Ledger != p.ledger || b.queued {
			continue
		}
		if !b.granted {
			return
		}
		b.queued = true
		p.ready.Appends = append(p.ready.Appends, b)
	}
}

func (p *Pipeline) find(batchID uint64) *Batch {
	for _, b := range p.inFlight {
		if b.ID == batchID {
			return b
		}
	}
	return nil
}

// Abandon: the owner lost the right to log for its producers (its etcd
// lease is gone: others take them over and fence its ledgers). Nothing
// waiting or in flight may be logged by it any more, nor granted again:
// every message is handed back, in order, for its frame to be refused.
// A grant that comes later for a batch never appended is reported Unused;
// appended entries are left to whoever recovers the ledger. The pipeline
// is left with no ledger and nothing to do.
func (p *Pipeline) Abandon() []Message {
	var back []Message
	for _, b := range p.inFlight {
		switch {
		case b.granted && !b.appended:
			p.ready.Unused = append(p.ready.Unused, UnusedReport{Ledger: b.Ledger, Span: b.Span()})
		case !b.granted && !b.refused:
			p.orphans[b.ID] = b
		}
		back = append(back, b.Messages...)
	}
	back = append(back, p.waiting...)
	p.inFlight, p.waiting = nil, nil
	p.ready.Appends = nil // not yet handed out: never sent
	p.ledger, p.state, p.wantLedger = 0, noLedger, false
	p.rolling, p.next = false, 0
	return back
}
