package sequencer

import (
	"reflect"
	"slices"
	"testing"
)

// commitLogSample is a log of three ledgers and two epochs: epoch 1
// decides [0,10), confirms [12,14) above its C and [10,12) without a
// watermark; epoch 2 takes over from C=10 and decides [10,30) again as
// one hole shape of its own.
func commitLogSample() [][][]byte {
	e := func(epoch uint64, recs ...Record) []byte { return EncodeCommitEntry(nil, epoch, recs) }
	wm := func(c uint64) Record { return Record{Kind: KindWatermark, Watermark: c} }
	return [][][]byte{
		{e(1, written(0, 3, 5, 0), written(3, 4, 5, 1)), e(1, holeRec(4, 6), wm(6))},
		{e(1, written(6, 10, 5, 2), wm(10), written(12, 14, 6, 0)), e(1, written(10, 12, 5, 3))},
		{e(2, holeRec(10, 20), written(20, 25, 8, 0), wm(25)), e(2, written(25, 30, 8, 1), wm(30))},
	}
}

func flatten(ledgers [][][]byte) [][]byte {
	var out [][]byte
	for _, l := range ledgers {
		out = append(out, l...)
	}
	return out
}

// TestCheckpointReplayEqualsWholeReplay: for every split of the list, a
// replay from the checkpoint's state plus the ledgers after it ends where
// the whole replay ends, and the chunks plus that replay's settled records
// are the whole replay's settled records.
func TestCheckpointReplayEqualsWholeReplay(t *testing.T) {
	log := commitLogSample()
	whole, err := Replay(flatten(log))
	if err != nil {
		t.Fatal(err)
	}
	for split := 0; split <= len(log); split++ {
		for _, chunkSegments := range []int{1, 2, 100} {
			b, err := buildCheckpoint(nil, nil, flatten(log[:split]), 0, chunkSegments)
			if err != nil {
				t.Fatal(err)
			}
			ix := b.index(3, 77, 0)
			rest := fromState(&b.State)
			if err := rest.replay(flatten(log[split:])); err != nil {
				t.Fatal(err)
			}
			if rest.C != whole.C || rest.Epoch != whole.Epoch {
				t.Fatalf("split %d: C %d epoch %d, want %d %d", split, rest.C, rest.Epoch, whole.C, whole.Epoch)
			}
			var got []Record
			for _, c := range b.Chunks {
				if len(c) > chunkSegments {
					t.Fatalf("chunk of %d segments, limit %d", len(c), chunkSegments)
				}
				got = append(got, c...)
			}
			for _, r := range rest.Settled() {
				got = append(got, r.Record)
			}
			var want []Record
			for _, r := range whole.Settled() {
				want = append(want, r.Record)
			}
			slices.SortFunc(got, func(a, b Record) int { return compareUint(a.Range.First, b.Range.First) })
			slices.SortFunc(want, func(a, b Record) int { return compareUint(a.Range.First, b.Range.First) })
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("split %d chunk %d:\n got %v\nwant %v", split, chunkSegments, got, want)
			}
			if ix.Start != 0 || ix.End != b.End || (len(ix.Chunks) > 0 && ix.Chunks[len(ix.Chunks)-1].Range.End != b.End) {
				t.Fatalf("split %d: index %+v, end %d", split, ix, b.End)
			}
		}
	}
}

// TestCheckpointOnCheckpointAndFloor: a second checkpoint folds on the
// first, keeps its chunks by reference, and drops those below the floor
// while still counting their holes.
func TestCheckpointOnCheckpointAndFloor(t *testing.T) {
	log := commitLogSample()
	first, err := buildCheckpoint(nil, nil, flatten(log[:2]), 0, 2)
	if err != nil {
		t.Fatal(err)
	}
	ix1 := first.index(1, 50, 0)
	second, err := buildCheckpoint(&first.State, &ix1, flatten(log[2:]), 6, 2)
	if err != nil {
		t.Fatal(err)
	}
	ix2 := second.index(2, 60, 0)
	if ix2.End != 30 || second.State.C != 30 || len(second.State.Pending) != 0 {
		t.Fatalf("second checkpoint ends at %d, state %+v", ix2.End, second.State)
	}
	// [0,3) [3,4) went in the first chunk, [4,6) [6,10) in the second:
	// both end at or below 6 only for the first.
	if len(second.Dropped) != 1 || second.Dropped[0].Range != (Range{0, 4}) || ix2.Start != 4 {
		t.Fatalf("dropped %v, start %d", second.Dropped, ix2.Start)
	}
	if ix2.Holes != 2+10 {
		t.Fatalf("holes below 30: %d, want 12", ix2.Holes)
	}
	if _, err := DecodeCheckpointIndex(EncodeCheckpointIndex(nil, ix2)); err != nil {
		t.Fatal(err)
	}
	if got := unreferencedCheckpointLedgers(checkpointTrack{pointer: CheckpointPointer{Ledger: 50}, index: &ix1},
		checkpointTrack{pointer: CheckpointPointer{Ledger: 60}, index: &ix2}); len(got) != 0 {
		t.Fatalf("ledger 50 still holds kept chunks, yet %v would be deleted", got)
	}
}
