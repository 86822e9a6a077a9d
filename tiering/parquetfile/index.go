package parquetfile

import "sort"

// rowIndex maps offsets to row numbers for one file. Rows are the offsets of
// [first, end) outside the holes, numbered from 0 in offset order, so
// row(o) = (o - first) - (hole offsets below o).
type rowIndex struct {
	first, end uint64
	holes      []Range
	// holesBefore[i] is the number of hole offsets in holes[:i].
	holesBefore []uint64
}

func newRowIndex(first, end uint64, holes []Range) rowIndex {
	ix := rowIndex{first: first, end: end, holes: holes, holesBefore: make([]uint64, len(holes)+1)}
	for i, h := range holes {
		ix.holesBefore[i+1] = ix.holesBefore[i] + h.Len()
	}
	return ix
}

// rowsBelow is the number of rows at offsets below o, for o in [first, end];
// when o holds a row it is that row's index.
func (ix rowIndex) rowsBelow(o uint64) int64 {
	// k = the number of holes starting below o.
	k := sort.Search(len(ix.holes), func(i int) bool { return ix.holes[i].First >= o })
	holeOffsets := ix.holesBefore[k]
	if k > 0 && ix.holes[k-1].End > o {
		// o is inside holes[k-1]: only [First, o) of it lies below o.
		holeOffsets -= ix.holes[k-1].End - o
	}
	return int64(o-ix.first) - int64(holeOffsets)
}

// inHole reports whether offset o of [first, end) holds no row.
func (ix rowIndex) inHole(o uint64) bool {
	k := sort.Search(len(ix.holes), func(i int) bool { return ix.holes[i].End > o })
	return k < len(ix.holes) && ix.holes[k].First <= o
}

// skipHole returns o when o holds a row, else the end of the hole holding
// o: the first offset at or after o that may hold a row.
func (ix rowIndex) skipHole(o uint64) uint64 {
	k := sort.Search(len(ix.holes), func(i int) bool { return ix.holes[i].End > o })
	if k < len(ix.holes) && ix.holes[k].First <= o {
		return ix.holes[k].End
	}
	return o
}

// offsetOfRow returns the offset of row r (0 <= r < rows).
func (ix rowIndex) offsetOfRow(r int64) uint64 {
	// Hole k lies after row r iff fewer than r+1 rows precede it, and the
	// rows preceding hole k are holes[k].First - first - holesBefore[k].
	k := sort.Search(len(ix.holes), func(k int) bool {
		return int64(ix.holes[k].First-ix.first-ix.holesBefore[k]) > r
	})
	return ix.first + uint64(r) + ix.holesBefore[k]
}

// clip narrows [from, to) to the file's range; empty is from >= to.
func (ix rowIndex) clip(from, to uint64) (uint64, uint64) {
	return max(from, ix.first), min(to, ix.end)
}
