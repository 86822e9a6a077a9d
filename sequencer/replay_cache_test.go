package sequencer

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// commitLogOf is a commit log of three closed ledgers (10, 11, 12) of
// epochs 5, 5 and 6, the last of which decides [10, 110) again.
func commitLogOf() map[uint64][][]byte {
	return map[uint64][][]byte{
		10: {EncodeCommitEntry(nil, 5, []Record{{Kind: KindWritten, Range: Range{0, 10}, Ledger: 7, Entry: 0}, {Kind: KindWatermark, Watermark: 10}})},
		11: {EncodeCommitEntry(nil, 5, []Record{{Kind: KindHole, Range: Range{59, 61}}})},
		12: {EncodeCommitEntry(nil, 6, []Record{{Kind: KindHole, Range: Range{10, 110}}, {Kind: KindWatermark, Watermark: 110}}),
			EncodeCommitEntry(nil, 6, []Record{{Kind: KindWritten, Range: Range{110, 112}, Ledger: 8, Entry: 3}})},
	}
}

// TestReplayCacheReadsOnlyTheLedgersAfterItsPrefix: a takeover with the
// first two ledgers cached reads only the third, and its replay equals
// one of the whole log; the cached copy is not changed by the takeover's.
func TestReplayCacheReadsOnlyTheLedgersAfterItsPrefix(t *testing.T) {
	log := commitLogOf()
	var read []uint64
	reader := func(_ context.Context, id uint64) ([][]byte, error) {
		read = append(read, id)
		return log[id], nil
	}
	var all [][]byte
	for _, id := range []uint64{10, 11, 12} {
		all = append(all, log[id]...)
	}
	whole, err := Replay(all)
	if err != nil {
		t.Fatal(err)
	}

	var c replayCache
	prefix, _, _, err := c.replayCommitLog(context.Background(), []uint64{10, 11}, reader)
	if err != nil {
		t.Fatal(err)
	}
	c.keep([]uint64{10, 11}, prefix)
	cachedRecords := slices.Clone(prefix.Records)

	read = nil
	got, folded, entries, err := c.replayCommitLog(context.Background(), []uint64{10, 11, 12}, reader)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(read, []uint64{12}) || entries != 2 || folded != 3 {
		t.Fatalf("read ledgers %v (%d entries), want only 12 (2)", read, entries)
	}
	if !reflect.DeepEqual(got, whole) {
		t.Fatalf("replay from the cache %+v, whole log %+v", got, whole)
	}
	if again, n := c.start([]uint64{10, 11, 12}); n != 2 || !slices.Equal(again.Records, cachedRecords) {
		t.Fatalf("the cached prefix changed: %d ledgers, %+v, want 2, %+v", n, again.Records, cachedRecords)
	}

	// A list the cache is not a prefix of is replayed whole.
	read = nil
	if _, _, _, err := c.replayCommitLog(context.Background(), []uint64{11, 12}, reader); err != nil || !slices.Equal(read, []uint64{11, 12}) {
		t.Fatalf("another list: read %v, %v", read, err)
	}
	// A shorter fold does not replace a longer one.
	c.keep([]uint64{10}, CommitMap{})
	if _, n := c.start([]uint64{10, 11, 12}); n != 2 {
		t.Fatalf("a shorter fold replaced the cache: prefix %d", n)
	}
}

// TestReplayCacheKeepsWhatItFoldedBeforeALedgerItCouldNotRead: the
// ledgers before one that cannot be read (a store down) or decoded stay
// folded, and the error names the ledger.
func TestReplayCacheKeepsWhatItFoldedBeforeALedgerItCouldNotRead(t *testing.T) {
	log := commitLogOf()
	broken := errors.New("store down")
	for _, tc := range []struct {
		name string
		read func(uint64) ([][]byte, error)
		want string
	}{
		{"unreadable", func(id uint64) ([][]byte, error) {
			if id == 11 {
				return nil, broken
			}
			return log[id], nil
		}, "commit ledger 11: store down"},
		{"torn", func(id uint64) ([][]byte, error) {
			if id == 11 {
				return [][]byte{log[11][0][:3]}, nil
			}
			return log[id], nil
		}, "commit ledger 11: commit entry 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c replayCache
			ids := []uint64{10, 11, 12}
			cm, folded, _, err := c.replayCommitLog(context.Background(), ids, func(_ context.Context, id uint64) ([][]byte, error) { return tc.read(id) })
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q…", err, tc.want)
			}
			only10, _ := Replay(log[10])
			if folded != 1 || !reflect.DeepEqual(cm, only10) {
				t.Fatalf("folded %d: %+v, want ledger 10's replay %+v", folded, cm, only10)
			}
			c.keep(ids[:folded], cm)
			if _, n := c.start(ids); n != 1 {
				t.Fatalf("kept a prefix of %d ledgers, want 1", n)
			}
		})
	}
}

// TestReplayCacheGivesWayToAnotherList: a fold of a list the cache is no
// prefix of replaces it, even a shorter one.
func TestReplayCacheGivesWayToAnotherList(t *testing.T) {
	var c replayCache
	c.keep([]uint64{10, 11, 12}, CommitMap{C: 3})
	c.keep([]uint64{20}, CommitMap{C: 7})
	if cm, n := c.start([]uint64{20, 21}); n != 1 || cm.C != 7 {
		t.Fatalf("start = %+v, %d; want the new list's fold", cm, n)
	}
	if !c.covers([]uint64{20}) || c.covers([]uint64{20, 21}) {
		t.Fatal("covers is wrong")
	}
	c.keep([]uint64{20, 21}, CommitMap{C: 9})
	if !c.covers([]uint64{20}) {
		t.Fatal("a longer fold does not cover its prefix")
	}
}

// TestReplayCacheOnACheckpoint: a replay on top of a checkpoint reads its
// state once, then only the ledgers after the cached prefix; a cache of
// another checkpoint (or none) holds nothing for it; and the result is
// the whole log's replay.
func TestReplayCacheOnACheckpoint(t *testing.T) {
	log := commitLogOf()
	b, err := buildCheckpoint(nil, nil, nil, append(slices.Clone(log[10]), log[11]...), 0, 4, 4)
	if err != nil {
		t.Fatal(err)
	}
	states := 0
	base := replayBase{ledger: 40, state: func(context.Context) (*CheckpointState, error) { states++; return &b.State, nil }}
	var read []uint64
	reader := func(_ context.Context, id uint64) ([][]byte, error) {
		read = append(read, id)
		return log[id], nil
	}
	var c replayCache
	c.keep([]uint64{12}, CommitMap{C: 99}) // a cache of the same ids, but from the log's start
	got, folded, _, err := c.replayFrom(context.Background(), base, []uint64{12}, reader)
	if err != nil || folded != 1 || states != 1 || !slices.Equal(read, []uint64{12}) {
		t.Fatalf("replay from the checkpoint: folded %d, %d state reads, ledgers %v, err %v", folded, states, read, err)
	}
	whole, err := Replay(append(append(slices.Clone(log[10]), log[11]...), log[12]...))
	if err != nil {
		t.Fatal(err)
	}
	if got.C != whole.C || got.Epoch != whole.Epoch {
		t.Fatalf("C %d epoch %d, want %d %d", got.C, got.Epoch, whole.C, whole.Epoch)
	}
	c.keepFrom(40, []uint64{12}, got)
	read = nil
	if _, folded, _, err := c.replayFrom(context.Background(), base, []uint64{12}, reader); err != nil || folded != 1 || states != 1 || len(read) != 0 {
		t.Fatalf("cached: folded %d, %d state reads, ledgers %v, err %v", folded, states, read, err)
	}
	if c.coversFrom(41, []uint64{12}) || !c.coversFrom(40, []uint64{12}) || c.covers([]uint64{12}) {
		t.Fatal("the cache answers for another checkpoint")
	}
}
