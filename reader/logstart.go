package reader

import "sync/atomic"

// logStart is the log start offset retention set (keys.LogStart): offsets
// below it are deleted, and reads of them answer OFFSET_OUT_OF_RANGE with
// the start in the error's "log_start" detail, so a client can go on from
// there. It only grows.
type logStart struct{ offset atomic.Uint64 }

// SetLogStart raises the log start the reader refuses reads below, and
// drops the commit map's segments below it. A lower value changes nothing.
func (r *Reader) SetLogStart(start uint64) {
	for {
		cur := r.start.offset.Load()
		if start <= cur {
			return
		}
		if r.start.offset.CompareAndSwap(cur, start) {
			r.commits.TrimBelow(start)
			return
		}
	}
}

// LogStart is the log start the reader refuses reads below.
func (r *Reader) LogStart() uint64 { return r.start.offset.Load() }
