package sequencer

import "time"

// segState is how far an offset run is resolved.
type segState uint8

const (
	segGranted segState = iota // granted (or reserved by an older epoch), not yet resolved
	segWritten                 // lies in a confirmed ledger entry
	segHole                    // a hole by invariant H
)

// segment is a run of offsets sharing one grant and one resolution.
type segment struct {
	Range
	state segState
	// ledger is the ledger the run was granted to; 0 marks a run of an
	// older epoch whose ledger this leader does not know.
	ledger uint64
	// entry is the ledger entry holding the run once written.
	entry int64
	// deadline is the grant's lease end on the sequencer's monotonic clock
	// (0 for older-epoch runs). Deadlines grow with offsets within an epoch.
	deadline time.Duration
}

func (s segment) resolved() bool { return s.state != segGranted }

// segmentList covers one contiguous offset range in offset order: the live
// segments segs[head:] partition [start, end) where start is the resolved
// prefix end (C before publication) and end the next offset to grant.
type segmentList struct {
	segs []segment
	head int
}

func (l *segmentList) live() []segment { return l.segs[l.head:] }

func (l *segmentList) push(s segment) { l.segs = append(l.segs, s) }

// find returns the index in live() of the segment containing x, or
// len(live()) if none does.
func (l *segmentList) find(x uint64) int {
	live := l.live()
	// Binary search for the first segment ending after x (hand-written:
	// this is on the path of every Written report).
	lo, hi := 0, len(live)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if live[mid].End > x {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	if lo < len(live) && live[lo].First <= x {
		return lo
	}
	return len(live)
}

// split makes x a segment boundary if it falls strictly inside a segment.
func (l *segmentList) split(x uint64) {
	i := l.find(x)
	live := l.live()
	if i == len(live) || live[i].First == x {
		return
	}
	right := live[i]
	right.First = x
	live[i].End = x
	abs := l.head + i + 1
	l.segs = append(l.segs, segment{})
	copy(l.segs[abs+1:], l.segs[abs:])
	l.segs[abs] = right
}

// popResolved drops the resolved segments at the front and reports the new
// front offset (fallback if the list became empty).
func (l *segmentList) popResolved(fallback uint64) uint64 {
	for l.head < len(l.segs) && l.segs[l.head].resolved() {
		l.head++
	}
	// Reclaim the dropped prefix once it dominates the slice.
	if l.head > 1024 && l.head*2 > len(l.segs) {
		n := copy(l.segs, l.segs[l.head:])
		l.segs = l.segs[:n]
		l.head = 0
	}
	if l.head == len(l.segs) {
		return fallback
	}
	return l.segs[l.head].First
}
