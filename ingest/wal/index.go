package wal

// The in-memory index: per-ledger state rebuilt by replaying record metas in
// journal order. It does no I/O; the store feeds it metas from appends, from
// index checkpoints and from scans, and asks it what an append may do.

// position locates a record in the journal. size 0 marks an entry the store
// once held but cannot read (a corrupt record): it is answered UNKNOWN.
type position struct {
	seg  uint32
	off  uint32
	size uint32
}

func (p position) known() bool { return p.size != 0 }

// journalPos is a point in the journal (segment, offset).
type journalPos struct {
	seg uint32
	off uint32
}

// durableAt reports whether the record at p ends at or before j.
func (p position) durableAt(j journalPos) bool {
	return p.seg < j.seg || (p.seg == j.seg && uint64(p.off)+uint64(p.size) <= uint64(j.off))
}

type ledgerState struct {
	id uint64
	// incarnation is the store incarnation that wrote the ledger's first
	// record; ABSENT is only ever answered for the current incarnation.
	incarnation uint64
	// segs lists the segments holding a record of this ledger, ascending.
	segs []uint32
	// entries[i] is the position of entry i.
	entries    []position
	fenced     bool
	closed     bool
	closedLast int64
	// lac is the highest LAC piggybacked on any entry, -1 if none.
	lac int64
	// tainted: damaged journal bytes may have held entries of this ledger,
	// so missing entries are UNKNOWN, not ABSENT.
	tainted bool
}

func (l *ledgerState) last() int64 { return int64(len(l.entries)) - 1 }

type index struct {
	ledgers map[uint64]*ledgerState
	// deleted remembers deleted ledgers so that they answer UNKNOWN and
	// refuse writes.
	deleted map[uint64]struct{}
	// corrupt: a damaged stretch could not be attributed, so a ledger the
	// store does not know may still have been written to it.
	corrupt bool
	// hideBound, when hideBoundKnown, bounds the ledgers the damage may
	// hide: it was all found when the store opened, and a ledger whose id
	// was allocated after that (above the bound) cannot have a record in
	// it (Store.TrustLedgersAbove).
	hideBound      uint64
	hideBoundKnown bool
	// damaged lists the segments holding damaged stretches.
	damaged map[uint32]bool
	// claimed are the ledgers the store has no record of but a corrupt
	// record claims (applyCorrupt). The claim is as unverified as the rest
	// of the record, so they are not ledgers the store holds; but a real
	// one may have lost its fence or its entries to the damage, so while
	// the damage may hide it a writer's append is refused, and a record of
	// it that survives does not make it trusted.
	claimed map[uint64]bool
}

func newIndex() *index {
	return &index{ledgers: map[uint64]*ledgerState{}, deleted: map[uint64]struct{}{}, damaged: map[uint32]bool{},
		claimed: map[uint64]bool{}}
}

func (x *index) ledger(id uint64, seg uint32, incarnation uint64) *ledgerState {
	l := x.ledgers[id]
	if l == nil {
		l = &ledgerState{id: id, incarnation: incarnation, closedLast: -1, lac: -1}
		x.ledgers[id] = l
	}
	return l
}

// apply replays one record of segment seg, written by incarnation.
func (x *index) apply(m recordMeta, seg uint32, incarnation uint64) {
	if m.Type == metaCorrupt {
		x.applyCorrupt(m, seg)
		return
	}
	// A live ledger is never in deleted: one map lookup on the hot path.
	l := x.ledgers[m.Ledger]
	if l == nil {
		if _, gone := x.deleted[m.Ledger]; gone {
			return
		}
	}
	if m.Type == RecordDelete {
		delete(x.ledgers, m.Ledger)
		delete(x.claimed, m.Ledger)
		x.deleted[m.Ledger] = struct{}{}
		return
	}
	if l == nil {
		l = x.ledger(m.Ledger, seg, incarnation)
		// A ledger the store first hears of through a fence, a close or an
		// entry past 0, while damage it cannot attribute sits in the
		// journal, may have had records in that damage: it answers UNKNOWN
		// for what it lacks, never ABSENT. (A recovery's copy to a ledger
		// the store has no record of journals a fence first: AppendAsync.)
		l.tainted = x.mayHide(m.Ledger) && (m.Type != RecordEntry || m.Entry > 0 || x.claimed[m.Ledger])
	}
	l.noteSegment(seg)
	switch m.Type {
	case RecordEntry:
		l.applyEntry(m, position{seg: seg, off: m.Offset, size: m.Size})
	case RecordFence:
		l.fenced = true
		l.lac = max(l.lac, m.LAC)
	case RecordClose:
		last := max(m.Entry, -1) // CloseLedger refuses less; be safe on replay
		l.fenced, l.closed, l.closedLast = true, true, last
		if l.last() > last {
			l.entries = l.entries[:last+1]
		}
	}
}

func (l *ledgerState) applyEntry(m recordMeta, p position) {
	if l.closed && m.Entry > l.closedLast || m.Entry < 0 {
		return
	}
	l.lac = max(l.lac, m.LAC)
	switch n := int64(len(l.entries)); {
	case m.Entry == n:
		if len(l.entries) == cap(l.entries) {
			// Double, unlike append's 1.25x for large slices: loading a big
			// store would otherwise spend its time copying.
			grown := make([]position, len(l.entries), max(64, 2*cap(l.entries)))
			copy(grown, l.entries)
			l.entries = grown
		}
		l.entries = append(l.entries, p)
	case m.Entry > n:
		// Only possible when damaged bytes held the entries in between.
		for int64(len(l.entries)) < m.Entry {
			l.entries = append(l.entries, position{})
		}
		l.entries = append(l.entries, p)
		l.tainted = true
	case !l.entries[m.Entry].known():
		// A recovery append repairing an entry lost to corruption.
		l.entries[m.Entry] = p
	}
}

// mayHide reports whether damage may hide records of ledger id.
func (x *index) mayHide(id uint64) bool {
	return x.corrupt && (!x.hideBoundKnown || id <= x.hideBound)
}

// applyCorrupt taints every ledger the damaged bytes may have belonged to:
// all ledgers known so far (the damage may have held their later entries)
// and, through x.corrupt, ledgers not known at all — the ledger the
// record claims among them. The claim is not taken for a ledger the store
// holds: it failed its checksum like the rest of the record, and a flipped
// byte in it names a ledger far above any allocated, which would make the
// store refuse every bound (TrustLedgersAbove) and hide every ledger. A
// claimed ledger that is real either is known already or was allocated
// before the store opened, at or below the bound; it is remembered in
// claimed.
func (x *index) applyCorrupt(m recordMeta, seg uint32) {
	for _, l := range x.ledgers {
		l.tainted = true
	}
	if m.Entry != metaUnattributed {
		if l := x.ledgers[m.Ledger]; l != nil {
			l.noteSegment(seg)
		} else if _, gone := x.deleted[m.Ledger]; !gone {
			x.claimed[m.Ledger] = true
		}
	}
	x.corrupt = true
	x.damaged[seg] = true
}

// appendVerdict is what an append of a given entry may do.
type appendVerdict int

const (
	verdictWrite    appendVerdict = iota // write a new record
	verdictExisting                      // compare with the record held
)

// checkAppend decides an append of entry to ledger id: write a new record,
// compare with the entry held, or refuse.
func (x *index) checkAppend(id uint64, entry int64, recovery bool) (appendVerdict, error) {
	if entry < 0 {
		return 0, ErrInvalidEntry
	}
	if _, gone := x.deleted[id]; gone {
		return 0, ErrLedgerDeleted
	}
	l := x.ledgers[id]
	if l == nil {
		if !recovery && x.claimed[id] && x.mayHide(id) {
			return 0, ErrDamaged // its fence may be what the damage took
		}
		if entry != 0 {
			return 0, &GapError{Ledger: id, Entry: entry, Next: 0}
		}
		return verdictWrite, nil
	}
	switch {
	case l.closed && !recovery, l.fenced && !recovery:
		return 0, ErrFenced
	case l.closed && entry > l.closedLast:
		return 0, ErrBeyondClose
	case l.tainted && !recovery:
		return 0, ErrDamaged
	}
	switch n := int64(len(l.entries)); {
	case entry == n:
		return verdictWrite, nil
	case entry > n:
		return 0, &GapError{Ledger: id, Entry: entry, Next: n}
	case !l.entries[entry].known():
		return verdictWrite, nil
	default:
		return verdictExisting, nil
	}
}

func (l *ledgerState) noteSegment(seg uint32) {
	if n := len(l.segs); n == 0 || l.segs[n-1] != seg {
		l.segs = append(l.segs, seg)
	}
}

// deadSegments returns the segments among candidates, all below limit and
// none in stillLive, that may be removed: no live ledger has a record in
// them. A segment with a damaged stretch is never removed: the damage may
// hide records of any ledger, and it is the damage in the journal that
// makes a replay answer UNKNOWN for them (removed, they would read ABSENT).
func (x *index) deadSegments(candidates []uint32, limit uint32, stillLive map[uint32]bool) []uint32 {
	live := map[uint32]bool{}
	for _, l := range x.ledgers {
		for _, seg := range l.segs {
			live[seg] = true
		}
	}
	var dead []uint32
	for _, seg := range candidates {
		if seg >= limit || live[seg] || stillLive[seg] || x.damaged[seg] {
			continue
		}
		dead = append(dead, seg)
	}
	return dead
}
