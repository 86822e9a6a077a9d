package ledger

import (
	"bytes"

	"orderlog/proto/walpb"
)

// The recovery decision (DESIGN §4), as plain functions over the answers of
// the W ensemble stores. recover.go does the I/O around them.

// answer is what one store said about a fence or an entry read.
type answer int

const (
	// answerNone: no reply (unreachable, timed out, transport error).
	answerNone answer = iota
	// answerPresent: the store holds it with a valid checksum.
	answerPresent
	// answerAbsent: the store, in the incarnation the ledger names, never held it.
	answerAbsent
	// answerUnknown: the store cannot tell. Never evidence of absence.
	answerUnknown
)

func answerOf(s walpb.EntryStatus) answer {
	switch s {
	case walpb.EntryStatus_PRESENT:
		return answerPresent
	case walpb.EntryStatus_ABSENT:
		return answerAbsent
	case walpb.EntryStatus_UNKNOWN:
		return answerUnknown
	}
	return answerNone
}

// fenceAnswer is one store's reply to Fence.
type fenceAnswer struct {
	answer answer // present: fenced, lac known; unknown: fenced, contents unknown
	lac    int64
}

// decideFence reports whether at least W−A+1 stores acknowledged the fence
// (a store of a newer incarnation answers UNKNOWN: it refuses the writer's
// appends too, so it counts) and the entry the walk starts after: the
// highest LAC any fenced store reported, or -1.
func decideFence(answers []fenceAnswer, w, a int) (fenced bool, startAfter int64) {
	count := 0
	startAfter = -1
	for _, f := range answers {
		switch f.answer {
		case answerPresent:
			count++
			startAfter = max(startAfter, f.lac)
		case answerUnknown:
			count++
		}
	}
	return count >= fenceQuorum(w, a), startAfter
}

// entryRead is one store's answer to a read of the entry being decided.
type entryRead struct {
	answer  answer
	span    *walpb.Span
	payload []byte
}

// entryVerdict is what recovery does with one entry.
type entryVerdict int

const (
	// verdictWait: neither a holder nor W−A+1 ABSENT answers (UNKNOWN or
	// missing replies). Ask again; never conclude.
	verdictWait entryVerdict = iota
	// verdictRollForward: some store holds the entry; copy it until A hold it.
	verdictRollForward
	// verdictEnd: W−A+1 stores answered ABSENT and none holds it, so it was
	// never confirmed; the ledger's last entry is the one before.
	verdictEnd
	// verdictConflict: two stores hold different bytes for the entry. A
	// single writer makes this impossible; recovery stops without deciding.
	verdictConflict
)

// decideEntry applies §4 to the answers for one entry. On verdictRollForward
// it returns the index of a store whose copy is to be rolled forward.
//
// ABSENT counts only from a store this recovery fenced (fenced[i]): an
// unfenced store may still take the writer's append of the entry after
// answering ABSENT, and with another store's earlier ack that confirms an
// entry the recovery would have cut off.
func decideEntry(reads []entryRead, fenced []bool, w, a int) (entryVerdict, int) {
	holder, absent := -1, 0
	for i, r := range reads {
		switch r.answer {
		case answerPresent:
			if holder >= 0 && !bytes.Equal(reads[holder].payload, r.payload) {
				return verdictConflict, -1
			}
			if holder < 0 {
				holder = i
			}
		case answerAbsent:
			if fenced[i] {
				absent++
			}
		}
	}
	switch {
	case holder >= 0:
		return verdictRollForward, holder
	case absent >= fenceQuorum(w, a):
		return verdictEnd, -1
	}
	return verdictWait, -1
}

// rolledForward reports whether an entry is held by enough stores: holders
// is the set of store indexes that answered PRESENT or acked the copy.
func rolledForward(holders []bool, a int) bool {
	n := 0
	for _, h := range holders {
		if h {
			n++
		}
	}
	return n >= a
}
