package wal

import (
	"encoding/hex"
	"math"
	"path/filepath"
	"sync"

	"orderlog/ingest/wal/walfs"
)

// Store is one WAL store: a journal of segment files shared by all ledgers.
// All methods are safe for concurrent use.
type Store struct {
	cfg  Config
	fs   walfs.FS
	dir  string
	id   cookie
	kick chan struct{}
	// stopped is closed when the commit loop has exited.
	stopped chan struct{}
	// retired takes each sealed segment from the commit loop to the
	// release loop, which closes released when the channel is closed and
	// drained.
	retired  chan retiredSegment
	released chan struct{}
	// corruptions were found while opening; immutable after Open.
	corruptions []*CorruptionError
	fresh       bool
	stats       statCounters
	lock        *dirLock
	// disk watches the file system of dir (disk.go).
	disk *diskWatch

	mu struct {
		sync.Mutex
		idx *index
		// tail is where the next record goes.
		tail journalPos
		// durable: every record ending at or before it is durable (under
		// the interval policy: written).
		durable      journalPos
		pending      *batch
		inflight     *batch
		pendingBytes int
		// failed is set by the first write or sync error; it wraps
		// ErrStoreFailed.
		failed  error
		closing bool
		// segments lists existing segment sequence numbers, ascending.
		segments []uint32
		// checkpointed is the newest sealed segment whose index checkpoint
		// is durable (the release loop writes them in journal order).
		// Dead segments are removed only below it: its checkpoint carries
		// every deletion made before it was taken.
		checkpointed uint32
		readers      map[uint32]walfs.File
		// maps holds the mapped sealed segments (mapped.go); unmappable
		// the segments that could not be mapped, read with pread.
		maps       map[uint32]*segmentMap
		unmappable map[uint32]bool
		// deleting holds, for each ledger whose delete record is queued
		// but not yet durable, the segments it had records in: they stay
		// live until the delete is durable (the index forgets the ledger
		// as soon as the record is queued).
		deleting map[uint64][]uint32
	}
	// space is signalled when the commit loop takes the pending batch.
	space *sync.Cond
	// checkpoints is signalled when the release loop has written a
	// checkpoint (or failed to).
	checkpoints *sync.Cond

	// Owned by the commit loop (and by Open/Close around it).
	active      walfs.File
	activeSeq   uint32
	activeMetas []recordMeta
}

// StoreID is the store's stable identity (hex), kept across incarnations
// unless the cookie is lost.
func (s *Store) StoreID() string { return hex.EncodeToString(s.id.storeID[:]) }

// TrustLedgersAbove tells the store that every ledger with a higher id was
// allocated after it opened (the caller read the id counter after Open).
// Damage found at open cannot hide records of those, so they answer ABSENT
// for what they lack, as on an undamaged store. Without it every ledger a
// damaged store has no record of answers UNKNOWN for as long as the damage
// is in the journal, and the recovery of a new ledger whose entries never
// reached the store waits for another member. The first call counts.
//
// A bound below a ledger the store knows cannot be right (etcd restored
// from an older backup, or another cluster's): it is refused, and false
// returned.
func (s *Store) TrustLedgersAbove(id uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for known := range s.mu.idx.ledgers {
		if known > id {
			return false
		}
	}
	for known := range s.mu.idx.deleted {
		if known > id {
			return false
		}
	}
	if !s.mu.idx.hideBoundKnown {
		s.mu.idx.hideBound, s.mu.idx.hideBoundKnown = id, true
	}
	return true
}

// MayHideLedgers reports whether damage found at open may hide records of
// ledgers the store does not know (from a scan, or from the checkpoint of
// an earlier open that found it): TrustLedgersAbove then matters.
func (s *Store) MayHideLedgers() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.idx.corrupt
}

// MayHideThrough is the highest ledger id whose records the damage found
// at open may hide: 0 without damage, the TrustLedgersAbove bound with
// one, and every id when the damage is not bounded.
func (s *Store) MayHideThrough() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case !s.mu.idx.corrupt:
		return 0
	case s.mu.idx.hideBoundKnown:
		return s.mu.idx.hideBound
	}
	return math.MaxUint64
}

// Incarnation is the store's current incarnation.
func (s *Store) Incarnation() uint64 { return s.id.incarnation }

// NewIncarnation reports whether this Open started a new incarnation.
func (s *Store) NewIncarnation() bool { return s.fresh }

// Corruptions lists the damaged stretches found while opening. Entries they
// may have held answer UNKNOWN; the rest of the store works normally.
func (s *Store) Corruptions() []*CorruptionError { return s.corruptions }

// Failed returns the error that stopped the store from accepting appends,
// or nil.
func (s *Store) Failed() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.failed
}

func (s *Store) path(name string) string { return filepath.Join(s.dir, name) }

// Close flushes pending appends, checkpoints the index of the active
// segment and marks the cookie clean. Entries are not affected.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.mu.closing {
		s.mu.Unlock()
		return ErrClosed
	}
	s.mu.closing = true
	s.space.Broadcast()
	s.mu.Unlock()
	s.wake()
	<-s.stopped
	<-s.released
	s.disk.close()

	s.mu.Lock()
	failed := s.mu.failed
	for seq, f := range s.mu.readers {
		f.Close()
		delete(s.mu.readers, seq)
	}
	for seq := range s.mu.maps {
		s.unmapLocked(seq) // mappings still leased live on until released
	}
	s.mu.Unlock()
	var err error
	if failed == nil {
		giveBackReservation(s.active)
		// A failed store's tail is re-verified by the next Open, so it
		// gets no checkpoint and no clean mark.
		err = s.writeCheckpoint(s.activeCheckpoint())
		if err == nil {
			c := s.id
			c.interval, c.clean = s.cfg.SyncInterval > 0, true
			err = writeFileAtomic(s.fs, s.dir, cookieName, encodeCookie(c))
		}
	}
	if cerr := s.active.Close(); err == nil {
		err = cerr
	}
	s.lock.release()
	return err
}

func (s *Store) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}
