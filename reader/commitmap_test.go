package reader

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"
)

func TestCommitMapServesOnlyBelowCAndNeverChangesCommittedSegments(t *testing.T) {
	m := NewCommitMap()
	must(t, m.Resolve(1, Segment{First: 0, End: 10, Ledger: 5, Entry: 1}))
	must(t, m.Resolve(1, Segment{First: 10, End: 12, Hole: true}))
	if _, ok := m.Lookup(3); ok {
		t.Fatal("served above C")
	}
	if err := m.Advance(1, 15); !errors.Is(err, ErrConflict) {
		t.Fatalf("C beyond the resolved prefix accepted: %v", err)
	}
	must(t, m.Advance(1, 12))
	if s, ok := m.Lookup(11); !ok || !s.Hole {
		t.Fatalf("lookup 11: %+v %v", s, ok)
	}
	if err := m.Resolve(2, Segment{First: 0, End: 10, Ledger: 6, Entry: 1}); !errors.Is(err, ErrConflict) {
		t.Fatalf("committed segment changed: %v", err)
	}
	must(t, m.Resolve(1, Segment{First: 0, End: 10, Ledger: 5, Entry: 1})) // exact replay is fine
	must(t, m.Advance(1, 5))                                               // C never decreases
	if _, c := m.Committed(); c != 12 {
		t.Fatalf("C went to %d", c)
	}
}

func TestNewerEpochReplacesUncommittedDecisionsAndOlderEpochIsIgnored(t *testing.T) {
	m := NewCommitMap()
	must(t, m.Resolve(1, Segment{First: 0, End: 4, Ledger: 1, Entry: 1}))
	must(t, m.Advance(1, 4))
	must(t, m.Resolve(1, Segment{First: 4, End: 8, Ledger: 1, Entry: 2})) // not yet committed
	must(t, m.Resolve(2, Segment{First: 4, End: 8, Hole: true}))          // the new leader decides
	must(t, m.Advance(2, 8))
	if s, _ := m.Lookup(5); !s.Hole {
		t.Fatalf("epoch 2 decision not kept: %+v", s)
	}
	must(t, m.Resolve(1, Segment{First: 8, End: 9, Ledger: 1, Entry: 3}))
	must(t, m.Advance(1, 9))
	if epoch, c := m.Committed(); epoch != 2 || c != 8 {
		t.Fatalf("older epoch moved the map: epoch %d C %d", epoch, c)
	}
}

func TestRangeAndWaitAbove(t *testing.T) {
	m := NewCommitMap()
	must(t, m.Resolve(1, Segment{First: 0, End: 3, Ledger: 1, Entry: 1}))
	must(t, m.Resolve(1, Segment{First: 3, End: 6, Ledger: 1, Entry: 2}))
	must(t, m.Advance(1, 6))
	segs, c := m.Range(4, 100, 10)
	if c != 6 || len(segs) != 1 || segs[0].First != 3 {
		t.Fatalf("range: %+v C=%d", segs, c)
	}
	done := make(chan uint64)
	go func() {
		c, _ := m.WaitAbove(context.Background(), 6)
		done <- c
	}()
	must(t, m.Resolve(1, Segment{First: 6, End: 7, Hole: true}))
	must(t, m.Advance(1, 7))
	select {
	case c := <-done:
		if c != 7 {
			t.Fatalf("woke at C=%d", c)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("WaitAbove did not wake")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := m.WaitAbove(ctx, 100); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled wait: %v", err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// Advance checks the resolved prefix from C on: a gap above C refuses the
// watermark until it is filled, whatever was committed before.
func TestAdvanceChecksTheRangeAboveC(t *testing.T) {
	m := NewCommitMap()
	for first := uint64(0); first < 1000; first += 10 {
		must(t, m.Resolve(1, Segment{First: first, End: first + 10, Ledger: 1, Entry: int64(first / 10)}))
		must(t, m.Advance(1, first+10))
	}
	must(t, m.Resolve(1, Segment{First: 1020, End: 1030, Hole: true})) // out of order: [1000, 1020) missing
	if err := m.Advance(1, 1030); !errors.Is(err, ErrConflict) {
		t.Fatalf("C over a gap accepted: %v", err)
	}
	must(t, m.Resolve(1, Segment{First: 1000, End: 1020, Ledger: 1, Entry: 100}))
	must(t, m.Advance(1, 1030))
	if _, c := m.Committed(); c != 1030 {
		t.Fatalf("C = %d, want 1030", c)
	}
}

// TestHoleOffsetsFollowC: the hole count kept as C moves equals a count
// over the map, with watermarks that fall inside holes and entries and
// segments above C that a newer epoch drops.
func TestHoleOffsetsFollowC(t *testing.T) {
	m := NewCommitMap()
	rng := rand.New(rand.NewPCG(7, 7))
	var next uint64
	epoch := int64(1)
	countBelowC := func() uint64 {
		_, c := m.Committed()
		var n uint64
		for x := uint64(0); x < c; x++ {
			if s, ok := m.Lookup(x); ok && s.Hole {
				n++
			}
		}
		return n
	}
	for step := 0; step < 300; step++ {
		size := 1 + rng.Uint64N(5)
		must(t, m.Resolve(epoch, Segment{First: next, End: next + size, Hole: rng.IntN(3) == 0, Ledger: 1, Entry: int64(step)}))
		next += size
		switch rng.IntN(4) {
		case 0: // C somewhere in the resolved prefix, maybe inside a segment
			_, c := m.Committed()
			must(t, m.Advance(epoch, c+rng.Uint64N(next-c+1)))
		case 1: // a newer leader: what lies above C is sent again
			epoch++
			_, c := m.Committed()
			next = c
			if s, ok := m.Lookup(c - 1); ok && c > 0 && s.End > c {
				next = s.End // the segment C cuts is kept
			}
		}
		if got, want := m.HoleOffsets(), countBelowC(); got != want {
			t.Fatalf("step %d: HoleOffsets %d, counted %d", step, got, want)
		}
	}
}
