package wal

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"orderlog/internal/event"
	"orderlog/internal/fileutil"
)

// Without a watch on its disk the store appends until a write or fsync
// fails with ENOSPC, and a failed store refuses everything until it is
// reopened (ErrStoreFailed): its ingest node then rolls ledgers over and
// over, and retention cannot even delete a ledger to make room. The
// watch samples the file system of the store's directory (statfs, one
// system call) every DiskLimits.SampleEvery and after every
// DiskLimits.SampleBytes written, and latches two marks with hysteresis:
//   - Full, from HighWater until below LowWater: the ingest node refuses
//     new messages (DISK_FULL) before it accepts them; what it already
//     accepted is still logged and acknowledged.
//   - Hard, from HardWater until below LowWater: the store itself refuses
//     appends that would create a ledger here and ordinary appends from
//     other nodes' writers (*DiskFullError), so that nobody can fill the
//     disk to ENOSPC. Its own node's writer finishes the entries it has in
//     flight; fences, closes and deletes always go through.

// DefaultDiskHighWater is the default DiskLimits.HighWater.
const DefaultDiskHighWater = 0.90

// DiskLimits configures the watch on the store's disk. The zero value is
// the default.
type DiskLimits struct {
	// HighWater is the used fraction (df's Use%) at which the disk counts
	// as full. Default DefaultDiskHighWater; 1 only when nothing is left.
	HighWater float64
	// LowWater is the fraction below which it has room again. Default
	// HighWater − 0.05: hysteresis, so that writes do not flap around the
	// mark.
	LowWater float64
	// HardWater is the fraction from which the store refuses new ledgers
	// and appends from other nodes. Default halfway from HighWater to 1.
	HardWater float64
	// SampleEvery is the sampling period. Default 250 ms.
	SampleEvery time.Duration
	// SampleBytes also samples after this many journal bytes were written.
	// Default 16 MiB: at the peak rate the period alone lets a few hundred
	// MiB through.
	SampleBytes int64
	// Stat reports the usage of the file system holding a directory; nil
	// means fileutil.StatDisk. Tests inject one.
	Stat func(dir string) (fileutil.DiskUsage, error)
}

// Validate fills defaults and rejects marks out of order.
func (d *DiskLimits) Validate() error {
	if d.HighWater == 0 {
		d.HighWater = DefaultDiskHighWater
	}
	if d.HighWater <= 0 || d.HighWater > 1 {
		return fmt.Errorf("wal: config: disk high-water %v out of range (0, 1]", d.HighWater)
	}
	if d.LowWater == 0 {
		d.LowWater = max(d.HighWater-0.05, d.HighWater/2)
	}
	if d.HardWater == 0 {
		d.HardWater = d.HighWater + (1-d.HighWater)/2
	}
	if d.LowWater <= 0 || d.LowWater >= d.HighWater || d.HardWater < d.HighWater || d.HardWater > 1 {
		return fmt.Errorf("wal: config: disk marks low %v < high %v <= hard %v <= 1 do not hold", d.LowWater, d.HighWater, d.HardWater)
	}
	if d.SampleEvery == 0 {
		d.SampleEvery = 250 * time.Millisecond
	}
	if d.SampleBytes == 0 {
		d.SampleBytes = 16 << 20
	}
	if d.SampleEvery < 0 || d.SampleBytes < 0 {
		return errors.New("wal: config: negative disk sampling")
	}
	if d.Stat == nil {
		d.Stat = fileutil.StatDisk
	}
	return nil
}

// ErrDiskFull matches every *DiskFullError.
var ErrDiskFull = errors.New("wal: disk full")

// DiskFullError is returned by an append the store refuses because its
// disk is above the hard mark (DiskLimits.HardWater): one that would create
// a ledger on this store, or an ordinary append from another node's writer.
// Nothing was written; the same append succeeds once the disk fell below
// the low-water mark.
type DiskFullError struct {
	Dir      string
	Fraction float64
	Mark     float64
}

func (e *DiskFullError) Error() string {
	return fmt.Sprintf("wal: disk of %s is %.1f%% used, above the hard mark %.1f%%: refusing new ledgers and appends from other nodes",
		e.Dir, 100*e.Fraction, 100*e.Mark)
}

// Is makes errors.Is(err, ErrDiskFull) hold.
func (e *DiskFullError) Is(target error) bool { return target == ErrDiskFull }

// DiskState is the store's disk as last sampled.
type DiskState struct {
	Usage fileutil.DiskUsage
	// Fraction is Usage.UsedFraction().
	Fraction float64
	// Full: at or above HighWater, and not below LowWater since.
	Full bool
	// Hard: at or above HardWater, and not below LowWater since.
	Hard bool
	// Limits are the marks in force.
	Limits DiskLimits
	// Err is the last sample's failure (the marks keep their state), or
	// nil. errors.ErrUnsupported: the platform cannot tell, never full.
	Err error
}

// diskMarks is the hysteresis of the two marks, without I/O.
type diskMarks struct {
	limits     DiskLimits
	full, hard bool
}

// observe applies one sample; it reports whether Full changed.
func (m *diskMarks) observe(fraction float64) (fullChanged bool) {
	wasFull := m.full
	switch {
	case fraction < m.limits.LowWater:
		m.full, m.hard = false, false
	case fraction >= m.limits.HighWater:
		m.full = true
		m.hard = m.hard || fraction >= m.limits.HardWater
	}
	return m.full != wasFull
}

// diskWatch samples the disk of one directory.
type diskWatch struct {
	dir    string
	stat   func(string) (fileutil.DiskUsage, error)
	every  time.Duration
	bytes  int64
	events event.Listener
	// written counts journal bytes since the last sample.
	written atomic.Int64
	// full mirrors mu.state.Full for the produce path, which asks it for
	// every frame from many goroutines.
	full       atomic.Bool
	kick, stop chan struct{}
	done       chan struct{}
	mu         struct {
		sync.Mutex
		marks diskMarks
		state DiskState
	}
}

func newDiskWatch(dir string, limits DiskLimits, events event.Listener) *diskWatch {
	w := &diskWatch{dir: dir, stat: limits.Stat, every: limits.SampleEvery, bytes: limits.SampleBytes, events: events,
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	w.mu.marks.limits = limits
	w.mu.state.Limits = limits
	return w
}

// run samples until close.
func (w *diskWatch) run() {
	defer close(w.done)
	t := time.NewTicker(w.every)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
		case <-w.kick:
		}
		w.sample()
	}
}

func (w *diskWatch) close() {
	close(w.stop)
	<-w.done
}

// wrote counts n journal bytes written and asks for a sample every
// SampleBytes. Called by the commit loop: it must not block.
func (w *diskWatch) wrote(n int) {
	if w.written.Add(int64(n)) < w.bytes {
		return
	}
	w.written.Store(0)
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// sample stats the disk now, applies the marks and returns the state.
func (w *diskWatch) sample() DiskState {
	usage, err := w.stat(w.dir)
	w.mu.Lock()
	if err != nil {
		w.mu.state.Err = err
		st := w.mu.state
		w.mu.Unlock()
		return st
	}
	fraction := usage.UsedFraction()
	changed := w.mu.marks.observe(fraction)
	w.mu.state = DiskState{Usage: usage, Fraction: fraction, Full: w.mu.marks.full, Hard: w.mu.marks.hard, Limits: w.mu.marks.limits}
	w.full.Store(w.mu.marks.full)
	st := w.mu.state
	w.mu.Unlock()
	if changed {
		mark := st.Limits.LowWater
		if st.Full {
			mark = st.Limits.HighWater
		}
		w.events.DiskFull(event.DiskInfo{Dir: w.dir, Full: st.Full, Used: usage.Used, Avail: usage.Avail, Total: usage.Total,
			Fraction: fraction, Mark: mark})
	}
	return st
}

func (w *diskWatch) state() DiskState {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.mu.state
}

// refusal is the error for an append the hard mark refuses, or nil.
func (w *diskWatch) refusal() error {
	st := w.state()
	if !st.Hard {
		return nil
	}
	return &DiskFullError{Dir: w.dir, Fraction: st.Fraction, Mark: st.Limits.HardWater}
}

// Disk returns the store's disk as last sampled.
func (s *Store) Disk() DiskState { return s.disk.state() }

// DiskFull is Disk().Full, without a lock: cheap enough to ask for every
// produce frame.
func (s *Store) DiskFull() bool { return s.disk.full.Load() }

// SampleDisk samples the store's disk now and returns it: for a caller
// that just freed space, and for tests, which drive the marks through
// DiskLimits.Stat rather than wait for the period.
func (s *Store) SampleDisk() DiskState { return s.disk.sample() }

// JournalBytes is the length of the journal's segment files: what the
// store's data takes on disk, besides checkpoints, the cookie and
// preallocated blocks. It stats every segment: for status pages and
// scrapes, not for hot paths.
func (s *Store) JournalBytes() int64 {
	s.mu.Lock()
	segs := append([]uint32(nil), s.mu.segments...)
	s.mu.Unlock()
	var total int64
	for _, seq := range segs {
		f, err := s.fs.Open(s.path(segmentName(seq)))
		if err != nil {
			continue // removed meanwhile
		}
		if size, err := f.Size(); err == nil {
			total += size
		}
		f.Close()
	}
	return total
}
