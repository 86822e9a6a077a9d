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
			b, err := buildCheckpoint(nil, nil, nil, flatten(log[:split]), 0, chunkSegments, 2)
			if err != nil {
				t.Fatal(err)
			}
			_, ix := b.layout(3, 77, 2)
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
			if ix.Start != 0 || ix.End != b.End || (len(ix.Pages) > 0 && ix.Pages[len(ix.Pages)-1].Range.End != b.End) {
				t.Fatalf("split %d: index %+v, end %d", split, ix, b.End)
			}
		}
	}
}

// writtenCkpt is one checkpoint as a test keeps it: its build, where its
// entries went, and its track.
type writtenCkpt struct {
	b     checkpointBuild
	pages [][]ChunkRef
	track checkpointTrack
}

// writeBuild lays b out in ledger id and tracks it as the leader would.
func writeBuild(b checkpointBuild, id uint64, pageChunks int) writtenCkpt {
	pages, ix := b.layout(1, id, pageChunks)
	referenced := map[uint64]bool{id: true}
	for _, pg := range ix.Pages {
		referenced[pg.Ledger] = true
	}
	for _, page := range pages {
		for _, c := range page {
			referenced[c.Ledger] = true
		}
	}
	return writtenCkpt{b: b, pages: pages, track: checkpointTrack{pointer: CheckpointPointer{Ledger: id}, state: &b.State,
		index: &ix, referenced: referenced, dropped: b.DroppedPages}}
}

// segmentsOf resolves an index through the written checkpoints to its
// segments, checking that pages and chunks tile it.
func segmentsOf(t *testing.T, ix CheckpointIndex, all map[uint64]writtenCkpt) []Record {
	t.Helper()
	var out []Record
	next := ix.Start
	for _, pg := range ix.Pages {
		w := all[pg.Ledger]
		page := w.pages[pg.Entry-int64(len(w.b.Chunks))]
		for _, c := range page {
			segs := all[c.Ledger].b.Chunks[c.Entry]
			if c.Range.First != next || segs[0].Range.First != next || segs[len(segs)-1].Range.End != c.Range.End {
				t.Fatalf("chunk %+v at %d holds %v", c, next, segs)
			}
			out = append(out, segs...)
			next = c.Range.End
		}
	}
	if next != ix.End {
		t.Fatalf("index tiles up to %d, not %d", next, ix.End)
	}
	return out
}

// TestCheckpointOnCheckpointAndFloor: later checkpoints keep earlier
// pages and chunks by reference, write a partial last page again, and
// drop pages below the floor while still counting their holes; a ledger
// is deleted only once nothing names it.
func TestCheckpointOnCheckpointAndFloor(t *testing.T) {
	log := commitLogSample()
	all := map[uint64]writtenCkpt{}
	b1, err := buildCheckpoint(nil, nil, nil, flatten(log[:2]), 0, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	all[50] = writeBuild(b1, 50, 2)
	// [0,3) [3,4) | [4,6) [6,10): two full pages in ledger 50.
	if got := segmentsOf(t, *all[50].track.index, all); len(got) != 4 {
		t.Fatalf("first checkpoint: %v", got)
	}
	last := func(w writtenCkpt) []ChunkRef { return w.pages[len(w.pages)-1] }
	b2, err := buildCheckpoint(all[50].track.state, all[50].track.index, last(all[50]), flatten(log[2:]), 6, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	all[60] = writeBuild(b2, 60, 2)
	ix2 := *all[60].track.index
	if ix2.Start != 4 || ix2.End != 30 || ix2.Holes != 2+10 || len(b2.DroppedPages) != 1 || len(b2.Tail) != 0 {
		t.Fatalf("second checkpoint: index %+v, dropped %v, tail %v", ix2, b2.DroppedPages, b2.Tail)
	}
	if got := segmentsOf(t, ix2, all); len(got) != 5 || got[0].Range.First != 4 {
		t.Fatalf("second checkpoint holds %v", got)
	}
	if gone := unreferencedCheckpointLedgers(all[50].track, all[60].track); len(gone) != 0 {
		t.Fatalf("ledger 50 still holds a kept page, yet %v would be deleted", gone)
	}
	// No new records; the floor passes page [4,10): ledger 50 goes, the
	// partial last page [25,30) is written again in ledger 70.
	b3, err := buildCheckpoint(all[60].track.state, &ix2, last(all[60]), nil, 12, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	all[70] = writeBuild(b3, 70, 2)
	ix3 := *all[70].track.index
	if ix3.Start != 10 || ix3.Holes != 12 || len(b3.Tail) != 1 || ix3.FirstLedger() != 60 {
		t.Fatalf("third checkpoint: index %+v, tail %v", ix3, b3.Tail)
	}
	if got := segmentsOf(t, ix3, all); len(got) != 3 {
		t.Fatalf("third checkpoint holds %v", got)
	}
	if gone := unreferencedCheckpointLedgers(all[60].track, all[70].track); !slices.Equal(gone, []uint64{50}) {
		t.Fatalf("deleted %v, want [50]", gone)
	}
	for _, ix := range []CheckpointIndex{ix2, ix3} {
		if _, err := DecodeCheckpointIndex(EncodeCheckpointIndex(nil, ix)); err != nil {
			t.Fatal(err)
		}
	}
}
