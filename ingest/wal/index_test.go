package wal

import (
	"errors"
	"math/rand"
	"reflect"
	"testing"
)

// modelLedger is the rule book of a ledger, written independently of index.go.
type modelLedger struct {
	next           int64
	fenced, closed bool
	closedLast     int64
	lac            int64
}

// TestIndexAgainstModel drives the index state machine with random
// appends, recovery appends, fences, closes and deletes, checks every
// verdict against a small model of the rules, and checks that replaying the
// accepted records into a fresh index (what Open does) gives the same state.
func TestIndexAgainstModel(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	x := newIndex()
	model := map[uint64]*modelLedger{}
	deleted := map[uint64]bool{}
	var journal []recordMeta
	offset := uint32(segmentHeaderSize)
	write := func(m recordMeta) {
		m.Offset, m.Size = offset, 60
		offset += 60
		journal = append(journal, m)
		x.apply(m, 0, 1)
	}
	for step := 0; step < 20000; step++ {
		ledger := uint64(rng.Intn(6))
		ml := model[ledger]
		switch op := rng.Intn(20); {
		case op < 15: // append, mostly the next id
			recovery := rng.Intn(4) == 0
			entry := int64(0)
			if ml != nil {
				entry = ml.next + int64(rng.Intn(4)) - 2
			}
			verdict, err := x.checkAppend(ledger, entry, recovery)
			want := modelAppend(ml, deleted[ledger], entry, recovery)
			if (err == nil) != (want == nil) || (want != nil && !errors.Is(err, want) && !sameKind(err, want)) {
				t.Fatalf("step %d: append %d/%d recovery=%v: got %v, model %v", step, ledger, entry, recovery, err, want)
			}
			if err != nil || verdict == verdictExisting {
				continue
			}
			if ml == nil {
				ml = &modelLedger{closedLast: -1, lac: -1}
				model[ledger] = ml
			}
			lac := entry - 1
			write(recordMeta{Type: RecordEntry, Ledger: ledger, Entry: entry, LAC: lac})
			ml.next = entry + 1
			ml.lac = max(ml.lac, lac)
		case op < 17:
			if deleted[ledger] {
				continue
			}
			if ml == nil {
				ml = &modelLedger{closedLast: -1, lac: -1}
				model[ledger] = ml
			}
			write(recordMeta{Type: RecordFence, Ledger: ledger, Entry: -1, LAC: ml.lac})
			ml.fenced = true
		case op < 19:
			if deleted[ledger] || ml == nil {
				continue
			}
			last := max(-1, ml.next-1-int64(rng.Intn(3)))
			write(recordMeta{Type: RecordClose, Ledger: ledger, Entry: last})
			ml.fenced, ml.closed, ml.closedLast = true, true, last
			ml.next = min(ml.next, last+1)
		default:
			if rng.Intn(10) != 0 {
				continue
			}
			write(recordMeta{Type: RecordDelete, Ledger: ledger, Entry: -1})
			delete(model, ledger)
			deleted[ledger] = true
		}
		for id, m := range model {
			l := x.ledgers[id]
			if l == nil || l.last() != m.next-1 || l.fenced != m.fenced || l.closed != m.closed || l.lac != m.lac {
				t.Fatalf("step %d: ledger %d index %+v, model %+v", step, id, l, m)
			}
		}
	}
	replayed := newIndex()
	for _, m := range journal {
		replayed.apply(m, 0, 1)
	}
	if !reflect.DeepEqual(replayed, x) {
		t.Fatalf("replaying the journal gives a different index")
	}
}

func modelAppend(ml *modelLedger, deleted bool, entry int64, recovery bool) error {
	switch {
	case entry < 0:
		return ErrInvalidEntry
	case deleted:
		return ErrLedgerDeleted
	case ml == nil && entry != 0:
		return &GapError{}
	case ml == nil:
		return nil
	case ml.closed && !recovery, ml.fenced && !recovery:
		return ErrFenced
	case ml.closed && entry > ml.closedLast:
		return ErrBeyondClose
	case entry > ml.next:
		return &GapError{}
	}
	return nil
}

func sameKind(err, want error) bool {
	var g1, g2 *GapError
	return errors.As(err, &g1) && errors.As(want, &g2)
}
