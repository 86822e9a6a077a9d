package reader

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
)

// Segment is one resolved offset range [First, End): a hole, or the offsets
// of one ledger entry.
type Segment struct {
	First, End uint64
	Hole       bool
	Ledger     uint64
	Entry      int64
}

// ErrConflict is returned when a record contradicts a committed segment;
// the reader then refuses to serve rather than serve either version.
var ErrConflict = errors.New("reader: commit record contradicts the committed map")

// CommitMapConfig bounds what a CommitMap keeps in memory.
type CommitMapConfig struct {
	// WindowSegments: once more segments than this are in memory, those
	// the newest loaded checkpoint holds are dropped (lookups below the
	// window load them from it). Default 262,144 (about 10 MiB).
	WindowSegments int
	// CachedChunks is the LRU of decoded checkpoint chunks. Default 8.
	CachedChunks int
}

func (c *CommitMapConfig) fillDefaults() {
	if c.WindowSegments <= 0 {
		c.WindowSegments = 1 << 18
	}
	if c.CachedChunks <= 0 {
		c.CachedChunks = 8
	}
}

// CommitMap is the reader's copy of the commit map. Safe for concurrent use.
//
// Invariant: every offset below committed is covered by exactly one
// segment, of base (the newest checkpoint loaded) below its end, or of
// segments (sorted, not overlapping) above the start of those.
type CommitMap struct {
	cfg CommitMapConfig
	mu  struct {
		sync.Mutex
		// base is the newest checkpoint loaded (nil: none); entries is
		// what chunks and checkpoints are read with (Reader sets it).
		base    *Checkpoint
		entries EntrySource
		epoch   int64
		// synced is the epoch of the last watermark applied, 0 before the
		// first: until a stream's watermark arrives, C is only what this
		// process had (0 after a start), not what the leader published.
		synced    int64
		committed uint64
		// holes counts the hole offsets below committed, kept as C moves:
		// Status and every metrics scrape ask, and a scan of the whole
		// history under the lock stalled reads as the history grew.
		holes    uint64
		segments []Segment
		changed  chan struct{} // closed and replaced whenever committed grows
	}
}

// NewCommitMap returns an empty map at C = 0 with the default bounds.
func NewCommitMap() *CommitMap { return NewCommitMapWith(CommitMapConfig{}) }

// NewCommitMapWith returns an empty map at C = 0.
func NewCommitMapWith(cfg CommitMapConfig) *CommitMap {
	cfg.fillDefaults()
	m := &CommitMap{cfg: cfg}
	m.mu.changed = make(chan struct{})
	return m
}

// useEntries sets where checkpoints are read from (New does).
func (m *CommitMap) useEntries(entries EntrySource) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.mu.entries = entries
}

func (m *CommitMap) entrySource() EntrySource {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.mu.entries
}

// Committed returns C and the epoch of the leader whose watermark set it:
// 0 until the first watermark, while C means nothing yet.
func (m *CommitMap) Committed() (epoch int64, committed uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.mu.synced, m.mu.committed
}

// Resolve records a Written or Hole decision carried by a commit-map stream
// of the given epoch (the leader's epoch, not the record's own tag: a new
// leader re-sends the confirmed records of older epochs it replayed below
// its C₀).
// Streams of an epoch older than the map's are ignored; a newer epoch first
// drops every segment at or above C, which the new stream sends again.
func (m *CommitMap) Resolve(epoch int64, s Segment) error {
	if s.End <= s.First {
		return fmt.Errorf("reader: empty segment [%d, %d)", s.First, s.End)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.adoptEpochLocked(epoch) {
		return nil
	}
	if s.First < m.mu.committed {
		// Below C nothing changes: a replayed record must match exactly.
		// One below the window lies in the checkpoint, the leader's own
		// settled map; it is not read back to compare.
		if existing, ok := m.lookupLocked(s.First); ok && existing == s || m.belowWindowLocked(s.First) {
			return nil
		}
		return fmt.Errorf("%w: [%d, %d) below C=%d", ErrConflict, s.First, s.End, m.mu.committed)
	}
	i := sort.Search(len(m.mu.segments), func(i int) bool { return m.mu.segments[i].End > s.First })
	if i < len(m.mu.segments) && m.mu.segments[i].First < s.End {
		if m.mu.segments[i] == s {
			return nil
		}
		return fmt.Errorf("%w: [%d, %d) overlaps [%d, %d)", ErrConflict, s.First, s.End, m.mu.segments[i].First, m.mu.segments[i].End)
	}
	m.mu.segments = append(m.mu.segments, Segment{})
	copy(m.mu.segments[i+1:], m.mu.segments[i:])
	m.mu.segments[i] = s
	return nil
}

// Advance records Watermark(C) carried by a stream of the given epoch. C never decreases; every
// offset below the new C must already be resolved.
func (m *CommitMap) Advance(epoch int64, committed uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.adoptEpochLocked(epoch) {
		return nil
	}
	m.mu.synced = epoch
	if committed <= m.mu.committed {
		return nil
	}
	if covered := m.coveredEndLocked(); covered < committed {
		return fmt.Errorf("%w: C=%d but only [0, %d) is resolved", ErrConflict, committed, covered)
	}
	m.mu.holes += m.holeOffsetsLocked(m.mu.committed, committed)
	m.setCommittedLocked(committed)
	m.trimWindowLocked()
	return nil
}

func (m *CommitMap) setCommittedLocked(committed uint64) {
	m.mu.committed = committed
	close(m.mu.changed)
	m.mu.changed = make(chan struct{})
}

// InstallCheckpoint makes cp the map's base: below its end, segments come
// from its chunks. A map behind it moves C up to its end (C, not the
// epoch: reads still wait for a leader's watermark); one ahead of it
// drops the segments it holds once the window is full. An older
// checkpoint than the base is ignored.
func (m *CommitMap) InstallCheckpoint(cp *Checkpoint) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mu.base != nil && cp.End() <= m.mu.base.End() {
		return nil
	}
	if cp.End() > m.mu.committed {
		segs := m.mu.segments
		i := sort.Search(len(segs), func(i int) bool { return segs[i].End > cp.End() })
		if i < len(segs) && segs[i].First < cp.End() {
			return fmt.Errorf("%w: [%d, %d) straddles the checkpoint's end %d", ErrConflict, segs[i].First, segs[i].End, cp.End())
		}
		m.mu.segments = append([]Segment(nil), segs[i:]...)
		m.mu.holes = cp.index.Holes
		m.mu.base = cp
		m.setCommittedLocked(cp.End())
		return nil
	}
	m.mu.base = cp
	m.trimWindowLocked()
	return nil
}

// trimWindowLocked drops the in-memory segments the base holds once more
// than the window are kept.
func (m *CommitMap) trimWindowLocked() {
	if m.mu.base == nil || len(m.mu.segments) <= m.cfg.WindowSegments {
		return
	}
	end := min(m.mu.base.End(), m.mu.committed)
	i := sort.Search(len(m.mu.segments), func(i int) bool { return m.mu.segments[i].End > end })
	if i > 0 {
		m.mu.segments = append([]Segment(nil), m.mu.segments[i:]...)
	}
}

// wantsCheckpoint says whether a newer checkpoint would shrink the
// window: more segments than it holds are in memory.
func (m *CommitMap) wantsCheckpoint() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.mu.segments) > m.cfg.WindowSegments
}

// belowWindowLocked says whether offset lies below the in-memory
// segments, in the base.
func (m *CommitMap) belowWindowLocked(offset uint64) bool {
	b := m.mu.base
	if b == nil || offset >= b.End() {
		return false
	}
	return len(m.mu.segments) == 0 || offset < m.mu.segments[0].First
}

// checkpointEnd is the end of the base checkpoint, 0 without one.
func (m *CommitMap) checkpointEnd() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mu.base == nil {
		return 0
	}
	return m.mu.base.End()
}

// Resident reports what the map holds in memory: segments in the window
// and in the cache of checkpoint chunks.
func (m *CommitMap) Resident() (window, cached int) {
	m.mu.Lock()
	window, base := len(m.mu.segments), m.mu.base
	m.mu.Unlock()
	if base != nil {
		cached = base.chunks.resident()
	}
	return window, cached
}

func (m *CommitMap) adoptEpochLocked(epoch int64) bool {
	if epoch < m.mu.epoch {
		return false
	}
	if epoch > m.mu.epoch {
		m.mu.epoch = epoch
		i := sort.Search(len(m.mu.segments), func(i int) bool { return m.mu.segments[i].First >= m.mu.committed })
		m.mu.segments = m.mu.segments[:i]
	}
	return true
}

// coveredEndLocked is the end of the contiguous resolved prefix. Everything
// below C is covered (the invariant), so the scan starts at C: from 0 it
// cost a pass over the whole history on every watermark.
func (m *CommitMap) coveredEndLocked() uint64 {
	end := m.mu.committed
	segs := m.mu.segments
	for i := sort.Search(len(segs), func(i int) bool { return segs[i].End > end }); i < len(segs) && segs[i].First <= end; i++ {
		end = segs[i].End
	}
	return end
}

// Lookup returns the committed segment holding offset, if offset < C;
// below the window it reads the checkpoint chunk (see Segments).
func (m *CommitMap) Lookup(offset uint64) (Segment, bool) {
	segs, _, err := m.Segments(context.Background(), offset, offset+1, 1)
	if err != nil || len(segs) == 0 || segs[0].First > offset {
		return Segment{}, false
	}
	return segs[0], true
}

func (m *CommitMap) lookupLocked(offset uint64) (Segment, bool) {
	i := sort.Search(len(m.mu.segments), func(i int) bool { return m.mu.segments[i].End > offset })
	if i == len(m.mu.segments) || m.mu.segments[i].First > offset {
		return Segment{}, false
	}
	return m.mu.segments[i], true
}

// Range is Segments without a context or an error (none for offsets in
// the window).
func (m *CommitMap) Range(from, to uint64, max int) ([]Segment, uint64) {
	segs, committed, _ := m.Segments(context.Background(), from, to, max)
	return segs, committed
}

// Segments returns up to max of the committed segments overlapping [from,
// to), in order, and C at the time of the call. A page takes a few at a
// time: a read from an early offset must not copy the whole rest of the
// history. Below the in-memory window they come from the base checkpoint's
// chunks (read outside the lock), up to its end; ErrBelowStart below its
// start.
func (m *CommitMap) Segments(ctx context.Context, from, to uint64, max int) ([]Segment, uint64, error) {
	m.mu.Lock()
	committed := m.mu.committed
	if m.belowWindowLocked(from) && from < committed {
		base := m.mu.base
		m.mu.Unlock()
		segs, err := base.Segments(ctx, from, min(to, committed, base.End()), max)
		return segs, committed, err
	}
	defer m.mu.Unlock()
	if b := m.mu.base; b != nil && from < b.Start() && from < committed {
		return nil, committed, fmt.Errorf("%w: %d < %d", ErrBelowStart, from, b.Start())
	}
	return m.rangeLocked(from, to, max), committed, nil
}

func (m *CommitMap) rangeLocked(from, to uint64, max int) []Segment {
	to = min(to, m.mu.committed)
	i := sort.Search(len(m.mu.segments), func(i int) bool { return m.mu.segments[i].End > from })
	var out []Segment
	for ; i < len(m.mu.segments) && m.mu.segments[i].First < to && len(out) < max; i++ {
		out = append(out, m.mu.segments[i])
	}
	return out
}

// WaitAbove blocks until C > offset or ctx ends, and returns C.
func (m *CommitMap) WaitAbove(ctx context.Context, offset uint64) (uint64, error) {
	for {
		m.mu.Lock()
		committed, changed := m.mu.committed, m.mu.changed
		m.mu.Unlock()
		if committed > offset {
			return committed, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return committed, ctx.Err()
		}
	}
}

// TrimBelow forgets segments that end at or below offset (tiered away).
func (m *CommitMap) TrimBelow(offset uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	offset = min(offset, m.mu.committed)
	i := sort.Search(len(m.mu.segments), func(i int) bool { return m.mu.segments[i].End > offset })
	m.mu.segments = append([]Segment(nil), m.mu.segments[i:]...)
}

// HoleOffsets counts the offsets below C that are holes (those trimmed
// away included: they are still holes of the log).
func (m *CommitMap) HoleOffsets() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.mu.holes
}

// holeOffsetsLocked counts the hole offsets in [from, to), which segments
// cover.
func (m *CommitMap) holeOffsetsLocked(from, to uint64) uint64 {
	segs := m.mu.segments
	var n uint64
	for i := sort.Search(len(segs), func(i int) bool { return segs[i].End > from }); i < len(segs) && segs[i].First < to; i++ {
		if segs[i].Hole {
			n += min(segs[i].End, to) - max(segs[i].First, from)
		}
	}
	return n
}
