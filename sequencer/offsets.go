package sequencer

import "fmt"

// Range is the half-open global offset range [First, End).
type Range struct {
	First uint64
	End   uint64
}

// Len is the number of offsets in r.
func (r Range) Len() uint64 {
	if r.End <= r.First {
		return 0
	}
	return r.End - r.First
}

// Empty reports whether r holds no offset.
func (r Range) Empty() bool { return r.End <= r.First }

// Contains reports whether offset x lies in r.
func (r Range) Contains(x uint64) bool { return x >= r.First && x < r.End }

// Intersect is the overlap of r and o (possibly empty).
func (r Range) Intersect(o Range) Range {
	out := Range{First: max(r.First, o.First), End: min(r.End, o.End)}
	if out.End < out.First {
		out.End = out.First
	}
	return out
}

func (r Range) String() string { return fmt.Sprintf("[%d,%d)", r.First, r.End) }

// EntrySpan is the offset range one ledger entry carries.
type EntrySpan struct {
	Entry int64
	Range Range
}
