package sequencer

import "time"

type pendingWatermark struct {
	seq uint64
	c   uint64
}

// Written reports, from the writer's session, that ledger entry `entry`
// holding r is confirmed (≤ the ledger's LAC).
func (m *Machine) Written(now time.Duration, id SessionID, ledgerID uint64, entry int64, r Range) {
	m.Heard(now, id)
	if !m.reportValid(id, ledgerID, r) {
		return
	}
	m.resolve(r, segWritten, ledgerID, entry, false)
	m.advance()
}

// Unused reports, from the writer's session, that no AddEntry was ever sent
// for the grant r: invariant H makes it a hole.
func (m *Machine) Unused(now time.Duration, id SessionID, ledgerID uint64, r Range) {
	m.Heard(now, id)
	if !m.reportValid(id, ledgerID, r) {
		return
	}
	m.resolve(r, segHole, ledgerID, 0, false)
	m.advance()
}

func (m *Machine) reportValid(id SessionID, ledgerID uint64, r Range) bool {
	if m.phase == phaseDeposed {
		return false
	}
	s := m.sessions[id]
	l := m.ledgers[ledgerID]
	switch {
	case s == nil:
		return false // an ended stream; its ledgers are being closed anyway
	case l == nil || l.Epoch != m.cfg.Epoch:
		// A stale report for an older epoch's ledger: that ledger is
		// resolved from its closed spans, never from reports.
		return false
	case l.Writer != s.incarnation:
		m.violation("report for ledger %d from %q, writer is %q", ledgerID, s.incarnation, l.Writer)
		return false
	case r.Empty():
		m.violation("empty range in report for ledger %d", ledgerID)
		return false
	}
	return true
}

// resolve decides r (clipped below at the resolved prefix) as Written in
// (ledgerID, entry) or as a Hole, emitting the records. Every offset of r
// must be granted to ledgerID (or, with older, to an older epoch) or already
// decided the same way; otherwise nothing is applied and a violation is
// reported.
func (m *Machine) resolve(r Range, st segState, ledgerID uint64, entry int64, older bool) {
	r.First = max(r.First, m.resolvedEnd)
	if r.Empty() {
		return
	}
	if r.End > m.nextOffset {
		m.violation("%s beyond the granted end %d", r, m.nextOffset)
		return
	}
	live := m.segs.live()
	first := m.segs.find(r.First)
	// Fast path: r is exactly one granted segment (one grant, one entry).
	if first < len(live) && live[first].Range == r && !live[first].resolved() &&
		(live[first].ledger == ledgerID || older && live[first].ledger == 0) {
		s := &live[first]
		s.state, s.ledger, s.entry = st, ledgerID, entry
		m.emit(s)
		return
	}
	for i := first; i < len(live) && live[i].First < r.End; i++ {
		s := live[i]
		switch {
		case !s.resolved() && (s.ledger == ledgerID || older && s.ledger == 0):
		case s.state == st && s.ledger == ledgerID && (st == segHole || s.entry == entry):
		default:
			m.violation("%s as %d/%d conflicts with %s (state %d ledger %d entry %d)",
				r, ledgerID, entry, s.Range, s.state, s.ledger, s.entry)
			return
		}
	}
	m.segs.split(r.First)
	m.segs.split(r.End)
	live = m.segs.live()
	for i := m.segs.find(r.First); i < len(live) && live[i].First < r.End; i++ {
		s := &live[i]
		if s.resolved() {
			continue
		}
		s.state, s.ledger, s.entry = st, ledgerID, entry
		m.emit(s)
	}
}

// emit appends the record deciding s, merging it into the previous record
// when that one decided the adjacent run the same way.
func (m *Machine) emit(s *segment) {
	kind := KindWritten
	if s.state == segHole {
		kind = KindHole
	}
	if n := len(m.out.Records); n > 0 {
		p := &m.out.Records[n-1]
		if p.Kind == kind && p.Range.End == s.First && (kind == KindHole || p.Ledger == s.ledger && p.Entry == s.entry) {
			p.Range.End = s.End
			return
		}
	}
	m.nextSeq++
	rec := Record{Kind: kind, Range: s.Range, Seq: m.nextSeq}
	if kind == KindWritten {
		rec.Ledger, rec.Entry = s.ledger, s.entry
	}
	m.out.Records = append(m.out.Records, rec)
}

// advance moves the resolved prefix end over resolved segments.
func (m *Machine) advance() {
	m.resolvedEnd = m.segs.popResolved(m.nextOffset)
}

// emitWatermark writes Watermark(C) after the records that resolved [.., C).
func (m *Machine) emitWatermark() {
	if m.phase == phaseDeposed || m.resolvedEnd <= m.watermarkEmitted {
		return
	}
	m.nextSeq++
	m.out.Records = append(m.out.Records, Record{Kind: KindWatermark, Watermark: m.resolvedEnd, Seq: m.nextSeq})
	m.watermarks = append(m.watermarks, pendingWatermark{seq: m.nextSeq, c: m.resolvedEnd})
	m.watermarkEmitted = m.resolvedEnd
}

// Confirmed reports that every record with Seq ≤ seq is confirmed in the
// commit ledger (≤ its LAC). C is published up to the highest confirmed
// watermark.
func (m *Machine) Confirmed(seq uint64) {
	i := 0
	for ; i < len(m.watermarks) && m.watermarks[i].seq <= seq; i++ {
		if c := m.watermarks[i].c; c > m.published {
			m.published = c
			m.out.Published, m.out.HasPublished = c, true
		}
	}
	m.watermarks = m.watermarks[i:]
	m.checkTakeover()
}
