package wal

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"

	"orderlog/ingest/wal/walfs"
)

// Open opens (creating if needed) the store in cfg.Dir and recovers it:
// index checkpoints are loaded for sealed segments, segments without a valid
// checkpoint are scanned and verified, a torn tail is truncated, damaged
// stretches elsewhere are reported by Corruptions and answered UNKNOWN.
// Appends then go to a new segment.
func Open(cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Store{cfg: cfg, fs: cfg.FS, dir: cfg.Dir, kick: make(chan struct{}, 1), stopped: make(chan struct{}),
		retired: make(chan retiredSegment, retiredBacklog), released: make(chan struct{})}
	s.space = sync.NewCond(&s.mu)
	s.checkpoints = sync.NewCond(&s.mu)
	s.mu.idx = newIndex()
	s.mu.readers = map[uint32]walfs.File{}
	s.mu.maps, s.mu.unmappable = map[uint32]*segmentMap{}, map[uint32]bool{}
	if err := s.fs.MkdirAll(s.dir); err != nil {
		return nil, fmt.Errorf("wal: create dir: %w", err)
	}
	lock, err := lockDir(s.fs, s.dir)
	if err != nil {
		return nil, fmt.Errorf("wal: lock %s: %w", s.dir, err)
	}
	s.lock = lock
	opened := false
	defer func() {
		if !opened {
			lock.release()
		}
	}()
	old, haveOld := readCookie(s.fs, s.dir)
	s.id, s.fresh = decideIdentity(old, haveOld, cfg.ExpectedIncarnation, cfg.Now())
	// The cookie is marked unclean for the whole run; only Close marks it
	// clean, which is what the interval policy's restart check relies on.
	running := s.id
	running.interval = cfg.SyncInterval > 0
	if err := writeFileAtomic(s.fs, s.dir, cookieName, encodeCookie(running)); err != nil {
		return nil, fmt.Errorf("wal: write cookie: %w", err)
	}
	probes := keyProbes{}
	next, err := s.recover(probes)
	if err != nil {
		return nil, fmt.Errorf("wal: recover: %w", err)
	}
	if err := s.checkKeys(probes); err != nil {
		s.closeReaders()
		return nil, err
	}
	if n := len(s.mu.segments); n > 0 {
		s.mu.checkpointed = s.mu.segments[n-1] // recovery checkpointed every segment it kept
	}
	f, err := s.createSegment(next)
	if err != nil {
		return nil, fmt.Errorf("wal: %w", err)
	}
	s.active, s.activeSeq = f, next
	s.mu.segments = append(s.mu.segments, next)
	s.mu.tail = journalPos{seg: next, off: segmentHeaderSize}
	s.mu.durable = s.mu.tail
	s.disk = newDiskWatch(s.dir, cfg.Disk, cfg.Events)
	s.disk.sample() // the marks hold from the first append on
	go s.disk.run()
	go s.releaseLoop()
	go s.commitLoop()
	opened = true
	return s, nil
}

// recover loads every existing segment into the index and returns the
// sequence number for the next segment; probes learns each segment's entry
// records to check the keys with.
func (s *Store) recover(probes keyProbes) (next uint32, err error) {
	names, err := s.fs.List(s.dir)
	if err != nil {
		return 0, err
	}
	var segs []uint32
	indexes := map[uint32]bool{}
	for _, name := range names {
		if seq, ok := parseFileName(name, segmentSuffix); ok {
			segs = append(segs, seq)
		} else if seq, ok := parseFileName(name, indexSuffix); ok {
			indexes[seq] = true
		} else if strings.HasSuffix(name, ".tmp") {
			s.fs.Remove(s.path(name))
		}
	}
	checkpoints, loaded := s.readCheckpoints(segs, indexes)
	consumed := 0
	defer func() { // after an error, let the readers finish
		for ; consumed < len(segs); consumed++ {
			<-checkpoints[consumed]
			loaded()
		}
	}()
	for i, seq := range segs {
		next = seq + 1
		tail := i == len(segs)-1
		x := <-checkpoints[i]
		loaded()
		consumed++
		if x != nil {
			for _, m := range x.metas {
				s.mu.idx.apply(m, seq, x.incarnation)
			}
			probes.note(seq, x.metas)
			s.mu.segments = append(s.mu.segments, seq)
			continue
		}
		kept, err := s.scanAndSeal(seq, tail, probes)
		if err != nil {
			return 0, err
		}
		if kept {
			s.mu.segments = append(s.mu.segments, seq)
		}
	}
	return next, nil
}

// readCheckpoints reads, verifies and decodes the index checkpoints of
// segs in the background; the i-th channel yields segs[i]'s checkpoint, or
// nil if the segment must be scanned. The caller applies them in journal
// order and calls done after each, which bounds how far decoding runs ahead
// (and so the memory it holds).
func (s *Store) readCheckpoints(segs []uint32, indexes map[uint32]bool) (out []chan *segmentIndex, done func()) {
	const lookahead = 4
	out = make([]chan *segmentIndex, len(segs))
	for i := range out {
		out[i] = make(chan *segmentIndex, 1)
	}
	tokens := make(chan struct{}, lookahead)
	work := make(chan int)
	go func() {
		defer close(work)
		for i := range segs {
			tokens <- struct{}{}
			work <- i
		}
	}()
	for range max(2, runtime.GOMAXPROCS(0)) {
		go func() {
			for i := range work {
				if !indexes[segs[i]] {
					out[i] <- nil
					continue
				}
				out[i] <- s.readCheckpoint(segs[i])
			}
		}()
	}
	return out, func() { <-tokens }
}

// readCheckpoint returns segment seq's index checkpoint if it is valid and
// matches the segment file, nil otherwise.
func (s *Store) readCheckpoint(seq uint32) *segmentIndex {
	b, err := readWholeFile(s.fs, s.path(indexName(seq)))
	if err != nil {
		return nil
	}
	x, err := decodeSegmentIndex(b)
	if err != nil || x.seq != seq {
		return nil
	}
	f, err := s.fs.Open(s.path(segmentName(seq)))
	if err != nil {
		return nil
	}
	size, err := f.Size()
	f.Close()
	if err != nil || size != x.end {
		return nil
	}
	return x
}

// scanAndSeal verifies segment seq record by record, truncates a torn tail
// (tail segment only), applies what it found and writes its checkpoint.
// kept is false if the segment was removed (an empty or headerless tail).
func (s *Store) scanAndSeal(seq uint32, tail bool, probes keyProbes) (kept bool, err error) {
	name := segmentName(seq)
	b, err := readWholeFile(s.fs, s.path(name))
	if err != nil {
		return false, err
	}
	res, err := scanSegment(name, b, tail)
	if errors.Is(err, errBadSegmentHeader) {
		if tail {
			// Crashed while creating the segment: it never held a record.
			s.fs.Remove(s.path(indexName(seq)))
			return false, s.removeFile(name)
		}
		ce := segmentCorruption(name, err)
		s.corruptions = append(s.corruptions, ce)
		s.mu.idx.apply(recordMeta{Type: metaCorrupt, Entry: metaUnattributed}, seq, 0)
		return true, nil
	}
	if err != nil {
		return false, err
	}
	// The tail segment is also truncated when it is whole: that gives back
	// the blocks it reserved beyond its length (createSegment).
	if tail || res.torn || res.end < int64(len(b)) {
		if err := s.truncate(name, res.end); err != nil {
			return false, err
		}
	}
	s.corruptions = append(s.corruptions, res.corruptions...)
	for _, m := range res.metas {
		s.mu.idx.apply(m, seq, res.header.incarnation)
	}
	probes.note(seq, res.metas)
	if tail && len(res.metas) == 0 {
		s.fs.Remove(s.path(indexName(seq)))
		return false, s.removeFile(name)
	}
	x := &segmentIndex{seq: seq, incarnation: res.header.incarnation, end: res.end,
		metas: append(deletedMetasLocked(s.mu.idx), res.metas...)}
	if err := writeFileAtomic(s.fs, s.dir, indexName(seq), encodeSegmentIndex(x)); err != nil {
		return false, fmt.Errorf("checkpoint index of %s: %w", name, err)
	}
	return true, nil
}

func (s *Store) truncate(name string, size int64) error {
	f, err := s.fs.OpenAppend(s.path(name))
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		return fmt.Errorf("truncate %s at %d: %w", name, size, err)
	}
	return f.Sync()
}

func (s *Store) removeFile(name string) error {
	if err := s.fs.Remove(s.path(name)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return s.fs.SyncDir(s.dir)
}

// closeReaders closes the read handles of a store that does not open.
func (s *Store) closeReaders() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for seq, f := range s.mu.readers {
		f.Close()
		delete(s.mu.readers, seq)
	}
}
