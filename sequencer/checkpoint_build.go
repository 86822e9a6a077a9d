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

// checkpointBuild is a new checkpoint before it is written: the chunks
// to append, the state, and what it keeps of the previous index.
type checkpointBuild struct {
	Chunks [][]Record
	State  CheckpointState
	// KeptPages are the previous index's pages that stay as they are;
	// Tail the chunks of its last page, which is written again with the
	// new chunks after it unless it was full; DroppedPages those that end
	// at or below the floor.
	KeptPages, DroppedPages []PageRef
	Tail                    []ChunkRef
	Start, End              uint64
	Holes                   uint64 // hole offsets below End, dropped ones included
}

// buildCheckpoint folds the entries of the replaced commit ledgers (in log
// order) onto the previous checkpoint (prevState, prevIndex and its last
// page's chunks; nil for none) and cuts the newly settled map into chunks
// of at most chunkSegments segments. Pages of the previous index that end
// at or below floor are dropped (retention deletes those offsets), and so
// are such chunks of the last page. It does no I/O.
func buildCheckpoint(prevState *CheckpointState, prevIndex *CheckpointIndex, prevLastPage []ChunkRef, entries [][]byte, floor uint64, chunkSegments, pageChunks int) (checkpointBuild, error) {
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
		b.Holes += holeOffsets(settled[:n])
		settled = settled[n:]
	}
	pages := prev.Pages
	if len(pages) > 0 && len(prevLastPage) < pageChunks {
		pages = pages[:len(pages)-1]
		b.Tail = slices.DeleteFunc(slices.Clone(prevLastPage), func(c ChunkRef) bool { return c.Range.End <= floor })
	}
	for _, pg := range pages {
		if pg.Range.End <= floor {
			b.DroppedPages = append(b.DroppedPages, pg)
		} else {
			b.KeptPages = append(b.KeptPages, pg)
		}
	}
	switch {
	case len(b.KeptPages) > 0:
		b.Start = b.KeptPages[0].Range.First
	case len(b.Tail) > 0:
		b.Start = b.Tail[0].Range.First
	default:
		b.Start = prev.End
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

// layout is where b's entries go in checkpoint ledger ledgerID: the new
// chunks as entries 0…, then the pages (the tail's chunks and the new
// ones, pageChunks to a page) right after; it returns the pages' chunk
// lists in order and the index that names them after the kept pages.
func (b checkpointBuild) layout(epoch, ledgerID uint64, pageChunks int) ([][]ChunkRef, CheckpointIndex) {
	refs := slices.Clone(b.Tail)
	for i, s := range b.Chunks {
		refs = append(refs, ChunkRef{Ledger: ledgerID, Entry: int64(i),
			Range: Range{First: s[0].Range.First, End: s[len(s)-1].Range.End}, Holes: holeOffsets(s)})
	}
	ix := CheckpointIndex{Epoch: epoch, Start: b.Start, End: b.End, Holes: b.Holes, Pages: slices.Clone(b.KeptPages)}
	var pages [][]ChunkRef
	for len(refs) > 0 {
		n := min(pageChunks, len(refs))
		page := refs[:n]
		pg := PageRef{Ledger: ledgerID, Entry: int64(len(b.Chunks) + len(pages)),
			Range: Range{First: page[0].Range.First, End: page[n-1].Range.End}, FirstLedger: page[0].Ledger}
		for _, c := range page {
			pg.Holes += c.Holes
		}
		pages, ix.Pages = append(pages, page), append(ix.Pages, pg)
		refs = refs[n:]
	}
	return pages, ix
}
