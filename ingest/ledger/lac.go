package ledger

// lacTracker is the writer's confirmation state machine. It does no I/O and
// takes no locks; the writer calls it under its mutex.
//
// Invariants: lac < next; acks[i] is the set of store indexes that acked
// entry lac+1+i; lac only grows, and not at all once frozen.
type lacTracker struct {
	ackQuorum int
	lac       int64    // last add confirmed: it and every entry before have ackQuorum acks
	next      int64    // id the next added entry gets
	acks      []uint64 // bitsets of store indexes, for entries lac+1 .. next-1
	frozen    bool
}

func newLACTracker(ackQuorum int) *lacTracker {
	return &lacTracker{ackQuorum: ackQuorum, lac: -1}
}

// add registers a new entry and returns its id.
func (t *lacTracker) add() int64 {
	id := t.next
	t.next++
	t.acks = append(t.acks, 0)
	return id
}

// ack records that store (an ensemble index < 64) acked entry and reports
// whether the LAC advanced. Acks of entries already confirmed, of entries
// never added, or after freeze change nothing.
func (t *lacTracker) ack(store int, entry int64) bool {
	if t.frozen || entry <= t.lac || entry >= t.next {
		return false
	}
	t.acks[entry-t.lac-1] |= 1 << uint(store)
	advanced := false
	for len(t.acks) > 0 && popcount(t.acks[0]) >= t.ackQuorum {
		t.acks = t.acks[1:]
		t.lac++
		advanced = true
	}
	return advanced
}

// freeze stops the LAC: every later ack is ignored. The writer freezes
// before its close CAS so the LAC it reports never exceeds the last entry it
// writes into the metadata.
func (t *lacTracker) freeze() int64 {
	t.frozen = true
	return t.lac
}

// inFlight is the number of added entries not yet confirmed.
func (t *lacTracker) inFlight() int64 { return t.next - t.lac - 1 }

func popcount(x uint64) int {
	n := 0
	for ; x != 0; x &= x - 1 {
		n++
	}
	return n
}
