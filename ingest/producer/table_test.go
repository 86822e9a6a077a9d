package producer

import (
	"errors"
	"math/rand/v2"
	"testing"
)

func refusal(t *testing.T, err error) *RefusalError {
	t.Helper()
	var r *RefusalError
	if !errors.As(err, &r) {
		t.Fatalf("got %v, want a refusal", err)
	}
	return r
}

func TestCheckAcceptsInOrderAndRefusesGapsStaleAndUnknown(t *testing.T) {
	tab := NewTable(4)
	tab.Register(State{ID: 1, Epoch: 3})

	d, err := tab.Check(1, 3, 0, 2)
	if err != nil || d.AcceptFrom != 0 {
		t.Fatalf("first frame: %+v %v", d, err)
	}
	if r := refusal(t, second(tab.Check(1, 3, 5, 1))); r.Reason != OutOfOrderSequence || r.ExpectedSeq != 2 {
		t.Fatalf("gap: %+v", r)
	}
	if r := refusal(t, second(tab.Check(1, 2, 2, 1))); r.Reason != Fenced || r.Epoch != 3 {
		t.Fatalf("stale epoch: %+v", r)
	}
	if r := refusal(t, second(tab.Check(1, 4, 2, 1))); r.Reason != UnknownProducer {
		t.Fatalf("future epoch: %+v", r)
	}
	if r := refusal(t, second(tab.Check(9, 1, 0, 1))); r.Reason != UnknownProducer {
		t.Fatalf("unknown producer: %+v", r)
	}
}

func second(_ Decision, err error) error { return err }

func TestOverlappingRetryAcceptsOnlyTheNewSuffix(t *testing.T) {
	tab := NewTable(8)
	tab.Register(State{ID: 1, Epoch: 1})
	mustCheck(t, tab, 1, 0, 3)
	if v, _ := tab.Lookup(1, 1); v != InFlight {
		t.Fatalf("seq 1 is %v, want InFlight", v)
	}
	if err := tab.Durable(1, 0, []uint64{100, 101, 102}); err != nil {
		t.Fatal(err)
	}
	d := mustCheck(t, tab, 1, 1, 4) // seqs 1..4: 1,2 duplicates, 3,4 new
	if d.AcceptFrom != 3 {
		t.Fatalf("AcceptFrom %d, want 3", d.AcceptFrom)
	}
	if v, off := tab.Lookup(1, 2); v != Duplicate || off != 102 {
		t.Fatalf("seq 2: %v %d", v, off)
	}
}

func TestFailedRollsBackEverythingAfterAndKeepsOrder(t *testing.T) {
	tab := NewTable(8)
	tab.Register(State{ID: 1, Epoch: 1})
	mustCheck(t, tab, 1, 0, 5)
	if err := tab.Durable(1, 0, []uint64{10, 11}); err != nil {
		t.Fatal(err)
	}
	tab.Failed(1, 2)
	if r := refusal(t, second(tab.Check(1, 1, 4, 1))); r.ExpectedSeq != 2 {
		t.Fatalf("after failure expected seq %d, want 2", r.ExpectedSeq)
	}
	if d := mustCheck(t, tab, 1, 2, 3); d.AcceptFrom != 2 {
		t.Fatalf("resend AcceptFrom %d", d.AcceptFrom)
	}
}

func TestWindowForgetsOldSeqsAndSnapshotRestores(t *testing.T) {
	tab := NewTable(2)
	tab.Register(State{ID: 1, Epoch: 1})
	mustCheck(t, tab, 1, 0, 3)
	if err := tab.Durable(1, 0, []uint64{5, 6, 7}); err != nil {
		t.Fatal(err)
	}
	if v, _ := tab.Lookup(1, 0); v != DuplicateWithoutOffset {
		t.Fatalf("seq 0 is %v, want DuplicateWithoutOffset", v)
	}
	snap, _ := tab.Get(1)
	if snap.DurableNext != 3 || len(snap.Window) != 2 || snap.Window[0] != 6 || snap.Window[1] != 7 {
		t.Fatalf("snapshot %+v", snap)
	}
	other := NewTable(2)
	other.Register(snap)
	if v, off := other.Lookup(1, 2); v != Duplicate || off != 7 {
		t.Fatalf("restored seq 2: %v %d", v, off)
	}
	if d := mustCheck(t, other, 1, 3, 1); d.AcceptFrom != 3 {
		t.Fatalf("restored next seq: %+v", d)
	}
}

func TestDurableOutOfOrderIsAnError(t *testing.T) {
	tab := NewTable(4)
	tab.Register(State{ID: 1, Epoch: 1})
	mustCheck(t, tab, 1, 0, 2)
	if err := tab.Durable(1, 1, []uint64{9}); err == nil {
		t.Fatal("durable report skipping seq 0 accepted")
	}
	if err := tab.Durable(1, 0, []uint64{1, 2, 3}); err == nil {
		t.Fatal("durable report beyond accepted accepted")
	}
}

// TestRandomScheduleNeverAcceptsASeqTwice drives random frames, outcomes and
// failures and checks against a plain model: every seq is logged at most once
// per attempt, durable seqs are dense and answered with their offsets.
func TestRandomScheduleNeverAcceptsASeqTwice(t *testing.T) {
	for seed := uint64(0); seed < 200; seed++ {
		rng := rand.New(rand.NewPCG(seed, 1))
		tab := NewTable(16)
		tab.Register(State{ID: 1, Epoch: 1})
		var inFlight []uint64 // accepted seqs, in order
		durable := map[uint64]uint64{}
		var durableNext, nextOffset uint64
		for step := 0; step < 300; step++ {
			switch rng.IntN(4) {
			case 0, 1: // a frame, possibly overlapping or beyond
				first := durableNext + uint64(rng.IntN(6)) - min(durableNext, 3)
				n := 1 + rng.IntN(4)
				d, err := tab.Check(1, 1, first, n)
				if err != nil {
					continue
				}
				for seq := d.AcceptFrom; seq < first+uint64(n); seq++ {
					for _, s := range inFlight {
						if s == seq {
							t.Fatalf("seed %d: seq %d accepted twice", seed, seq)
						}
					}
					if _, ok := durable[seq]; ok {
						t.Fatalf("seed %d: durable seq %d accepted again", seed, seq)
					}
					inFlight = append(inFlight, seq)
				}
			case 2: // some in-flight seqs become durable, in order
				k := rng.IntN(len(inFlight) + 1)
				offsets := make([]uint64, k)
				for i := range offsets {
					offsets[i] = nextOffset
					durable[inFlight[i]] = nextOffset
					nextOffset++
				}
				if err := tab.Durable(1, durableNext, offsets); err != nil {
					t.Fatalf("seed %d: %v", seed, err)
				}
				durableNext += uint64(k)
				inFlight = inFlight[k:]
			case 3: // the rest of the flight fails
				if len(inFlight) > 0 {
					tab.Failed(1, inFlight[0])
					inFlight = nil
				}
			}
			for seq, offset := range durable {
				if v, got := tab.Lookup(1, seq); v == Duplicate && got != offset {
					t.Fatalf("seed %d: seq %d answered offset %d, logged at %d", seed, seq, got, offset)
				} else if v != Duplicate && v != DuplicateWithoutOffset {
					t.Fatalf("seed %d: durable seq %d looked up as %v", seed, seq, v)
				}
			}
		}
	}
}

func mustCheck(t *testing.T, tab *Table, id, firstSeq uint64, n int) Decision {
	t.Helper()
	d, err := tab.Check(id, 1, firstSeq, n)
	if err != nil {
		t.Fatal(err)
	}
	return d
}
