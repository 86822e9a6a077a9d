package wal

import (
	"path/filepath"
	"testing"
	"time"

	"orderlog/ingest/wal/walfs"
)

// ledgerOneThenTwo opens a store whose first segment holds ledger 1's
// entries 0..2 and the start of ledger 2, which goes on into the next
// segment; it returns the first segment's sequence number.
func ledgerOneThenTwo(t *testing.T, fsys *walfs.CrashFS) (*Store, uint32) {
	t.Helper()
	s := openMem(t, fsys, nil)
	seg0 := s.activeSeq
	mustAppend(t, s, 1, 0, 3)
	fillToSegment(t, s, 2, 0, seg0+1)
	return s, seg0
}

// fillToSegment appends entries of ledger from next on until the journal's
// tail is in segment seg, and returns the next entry id.
func fillToSegment(t *testing.T, s *Store, ledger uint64, next int64, seg uint32) int64 {
	t.Helper()
	for s.mu.tail.seg < seg {
		mustAppend(t, s, ledger, next, next+1)
		next++
	}
	return next
}

// TestDamagedSegmentIsNeverRemoved: ledger 1 lies only in segment 0, whose
// damage the store cannot attribute, so it answers UNKNOWN, also after a
// recovery fenced it. Deleting ledger 2, the other one in segment 0, must not
// remove the segment: without the damage in the journal a replay would
// answer ABSENT for entries the store acknowledged.
func TestDamagedSegmentIsNeverRemoved(t *testing.T) {
	fsys := walfs.NewCrashFS(1)
	s, seg0 := ledgerOneThenTwo(t, fsys)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	fsys.Corrupt(filepath.Join(testDir, segmentName(seg0)), func(d []byte) []byte { d[20] ^= 1; return d })
	fsys.Remove(filepath.Join(testDir, indexName(seg0)))
	s = openMem(t, fsys, nil)
	expectStatus(t, s, 1, 0, Unknown)
	if _, err := s.Fence(1); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(2); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = openMem(t, fsys, nil)
	defer s.Close()
	expectStatus(t, s, 1, 0, Unknown)
}

// TestSegmentsOfAnUndurableDeleteStay: while ledger 1's delete waits for its
// fdatasync, another delete's removal of dead segments runs; it must keep
// ledger 1's segment, or a crash before the delete is durable leaves the
// ledger's acknowledged entries gone (ABSENT) instead of still there.
func TestSegmentsOfAnUndurableDeleteStay(t *testing.T) {
	fsys := walfs.NewCrashFS(1)
	s, seg0 := ledgerOneThenTwo(t, fsys)
	fillToSegment(t, s, 3, 0, seg0+2)
	if err := s.Delete(2); err != nil {
		t.Fatal(err)
	}
	release := fsys.HoldSyncs() // ledger 1's delete is written, never synced
	deleted := make(chan error, 1)
	go func() { deleted <- s.Delete(1) }()
	for queued := false; !queued; time.Sleep(time.Millisecond) {
		s.mu.Lock()
		_, queued = s.mu.idx.deleted[1]
		s.mu.Unlock()
	}
	if err := s.removeDeadSegments(); err != nil { // as another Delete would
		t.Fatal(err)
	}
	fsys.Crash()
	release()
	if err := <-deleted; err == nil {
		t.Fatal("ledger 1's delete succeeded, but its sync came after the crash")
	}
	s = openMem(t, fsys, nil)
	defer s.Close()
	expectPresent(t, s, 1, 0)
}
