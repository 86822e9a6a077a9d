package sequencer

import (
	"fmt"
	"slices"
)

// A checkpoint replaces a prefix of the commit-ledger list: it is the
// replay of those ledgers (on top of the previous checkpoint) in two
// parts. The settled map below its End goes into chunks, compactly (runs
// of one ledger's entries, docs/format/commit-log.md §5); the rest of the
// replay's state (C, the highest epoch, and the records at or above End)
// goes into the state entry. So a replay that starts from the checkpoint's
// state and goes on with the ledgers after the prefix ends exactly where a
// replay of the whole list ends, and the chunks hold what it dropped.

// ErrCheckpointGap is returned when a replay on top of a checkpoint finds a
// record deciding an offset below the checkpoint's settled end: the list
// and the checkpoint do not belong together.
var ErrCheckpointGap = fmt.Errorf("%w: a record below the checkpoint's end", ErrCorruptCheckpoint)

// fromState is the replay a checkpoint state stands for (nil: an empty
// log). The records are copied: the caller may extend the result.
func fromState(st *CheckpointState) CommitMap {
	if st == nil {
		return CommitMap{}
	}
	return CommitMap{C: st.C, Epoch: st.Folded, Records: slices.Clone(st.Pending)}
}

// settle takes from cm the records that tile [from, …) below cm.C, in
// offset order, and returns them with the end of the tiled prefix. The
// records left in cm (log order kept) all lie at or above that end. A
// record that straddles C, or a gap, stops the prefix there.
func settle(cm *CommitMap, from uint64) ([]Record, uint64, error) {
	sorted := slices.Clone(cm.Records)
	slices.SortStableFunc(sorted, func(a, b EpochRecord) int { return compareUint(a.Range.First, b.Range.First) })
	var out []Record
	end := from
	for _, r := range sorted {
		if r.Range.First < end {
			return nil, from, fmt.Errorf("%w: %v", ErrCheckpointGap, r.Record)
		}
		if r.Range.First != end || r.Range.End > cm.C {
			break
		}
		out = append(out, Record{Kind: r.Kind, Range: r.Range, Ledger: r.Ledger, Entry: r.Entry})
		end = r.Range.End
	}
	cm.Records = slices.DeleteFunc(cm.Records, func(r EpochRecord) bool { return r.Range.End <= end })
	return out, end, nil
}

func compareUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// checkpointBuild is a new checkpoint before it is written: the chunks to
// append, the state, and the index once the chunks have entry ids.
type checkpointBuild struct {
	Chunks [][]Record
	State  CheckpointState
	// Kept are the previous index's chunks that stay (none lies wholly
	// below the floor); Dropped those that go.
	Kept, Dropped []ChunkRef
	Start, End    uint64
	Holes         uint64 // hole offsets below End, dropped ones included
}

// buildCheckpoint folds the entries of the replaced commit ledgers (in log
// order) onto the previous checkpoint (prevState and prevIndex, nil for
// none) and cuts the newly settled map into chunks of at most
// chunkSegments segments. Chunks of the previous index that end at or
// below floor are dropped (retention deletes those offsets). It does no
// I/O.
func buildCheckpoint(prevState *CheckpointState, prevIndex *CheckpointIndex, entries [][]byte, floor uint64, chunkSegments int) (checkpointBuild, error) {
	cm := fromState(prevState)
	if err := cm.replay(entries); err != nil {
		return checkpointBuild{}, err
	}
	var prev CheckpointIndex
	if prevIndex != nil {
		prev = *prevIndex
	}
	settled, end, err := settle(&cm, prev.End)
	if err != nil {
		return checkpointBuild{}, err
	}
	b := checkpointBuild{State: CheckpointState{C: cm.C, Folded: cm.Epoch, Pending: cm.Records}, End: end, Holes: prev.Holes}
	for len(settled) > 0 {
		n := min(chunkSegments, len(settled))
		b.Chunks = append(b.Chunks, settled[:n])
		settled = settled[n:]
	}
	for _, s := range b.Chunks {
		b.Holes += holeOffsets(s)
	}
	for _, c := range prev.Chunks {
		if c.Range.End <= floor {
			b.Dropped = append(b.Dropped, c)
		} else {
			b.Kept = append(b.Kept, c)
		}
	}
	b.Start = prev.End
	if len(b.Kept) > 0 {
		b.Start = b.Kept[0].Range.First
	}
	return b, nil
}

// holeOffsets counts the hole offsets among segments.
func holeOffsets(segments []Record) uint64 {
	var n uint64
	for _, s := range segments {
		if s.Kind == KindHole {
			n += s.Range.Len()
		}
	}
	return n
}

// index is the new checkpoint's index once its chunks were appended to
// ledger as entries firstEntry, firstEntry+1, ….
func (b checkpointBuild) index(epoch, ledgerID uint64, firstEntry int64) CheckpointIndex {
	ix := CheckpointIndex{Epoch: epoch, Start: b.Start, End: b.End, Holes: b.Holes, Chunks: slices.Clone(b.Kept)}
	for i, s := range b.Chunks {
		ix.Chunks = append(ix.Chunks, ChunkRef{Ledger: ledgerID, Entry: firstEntry + int64(i),
			Range: Range{First: s[0].Range.First, End: s[len(s)-1].Range.End}, Holes: holeOffsets(s)})
	}
	return ix
}
