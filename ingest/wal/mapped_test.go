package wal

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"orderlog/ingest/wal/walfs"
)

// mapCountingFS is the operating system's filesystem whose mappings are
// counted: how many are live (mapped, not yet unmapped).
type mapCountingFS struct {
	walfs.OS
	live atomic.Int64
}

type mapCountingFile struct {
	walfs.File
	fs *mapCountingFS
}

type countedMapping struct {
	walfs.Mapping
	fs     *mapCountingFS
	closed atomic.Bool
}

func (f *mapCountingFS) Open(name string) (walfs.File, error) {
	file, err := f.OS.Open(name)
	if err != nil {
		return nil, err
	}
	return mapCountingFile{File: file, fs: f}, nil
}

func (f mapCountingFile) MapReadOnly(size int64) (walfs.Mapping, error) {
	m, err := f.File.(walfs.Mapper).MapReadOnly(size)
	if err != nil {
		return nil, err
	}
	f.fs.live.Add(1)
	return &countedMapping{Mapping: m, fs: f.fs}, nil
}

func (m *countedMapping) Close() error {
	if m.closed.Swap(true) {
		panic("mapping closed twice")
	}
	m.fs.live.Add(-1)
	return m.Mapping.Close()
}

// openDisk opens a store on the real filesystem (through fsys) in a
// temporary directory, with 64 KiB segments.
func openDisk(t *testing.T, fsys walfs.FS) (*Store, string) {
	t.Helper()
	dir := t.TempDir()
	s, err := Open(Config{Dir: dir, FS: fsys, SegmentSize: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, dir
}

// bigEntry is entry of ledger with a payload of a few KiB, so that a
// record spans pages of the mapping.
func bigEntry(ledger uint64, entry int64) Entry {
	e := entryFor(ledger, entry)
	e.Payload = bytes.Repeat(payloadFor(ledger, entry), 200)
	return e
}

func appendBig(t *testing.T, s *Store, ledger uint64, from, to int64) {
	t.Helper()
	for e := from; e < to; e++ {
		if err := s.Append(bigEntry(ledger, e)); err != nil {
			t.Fatalf("append %d/%d: %v", ledger, e, err)
		}
	}
}

// checkBorrowed borrows entry of ledger and checks it is what was appended
// and what Read answers; the lease is the caller's to release.
func checkBorrowed(t *testing.T, s *Store, ledger uint64, entry int64) *Lease {
	t.Helper()
	r, lease := s.Borrow(ledger, entry)
	want := bigEntry(ledger, entry)
	if r.Status != Present || !bytes.Equal(r.Payload, want.Payload) || r.Span != want.Span || r.LAC != want.LAC {
		lease.Release()
		t.Fatalf("borrow %d/%d = %v span %v lac %d err %v, want the appended entry", ledger, entry, r.Status, r.Span, r.LAC, r.Err)
	}
	return lease
}

// TestBorrowReadsSealedSegmentsInPlace: entries of sealed segments are lent
// from a mapping, those of the active segment copied; both are what was
// appended. On a filesystem without mappings (CrashFS) every entry is
// copied, and Borrow answers what Read answers.
func TestBorrowReadsSealedSegmentsInPlace(t *testing.T) {
	fsys := &mapCountingFS{}
	s, _ := openDisk(t, fsys)
	appendBig(t, s, 1, 0, 60) // ~5 KiB each: about 5 segments
	s.mu.Lock()
	active := s.mu.tail.seg
	s.mu.Unlock()
	mapped := 0
	for e := int64(0); e < 60; e++ {
		lease := checkBorrowed(t, s, 1, e)
		pos := s.mu.idx.ledgers[1].entries[e]
		if lease.Borrowed() != (pos.seg < active) {
			t.Fatalf("entry %d in segment %d (active %d): borrowed %v", e, pos.seg, active, lease.Borrowed())
		}
		if lease.Borrowed() {
			mapped++
		}
		lease.Release()
		lease.Release() // a second release does nothing
	}
	if mapped == 0 {
		t.Fatal("no entry was lent from a mapping")
	}
	if r, lease := s.Borrow(1, 60); r.Status != Absent || lease != nil {
		t.Fatalf("borrow beyond the last entry = %v, lease %v", r.Status, lease)
	}

	mem := openMem(t, walfs.NewCrashFS(1), nil)
	mustAppend(t, mem, 1, 0, 300)
	for e := int64(0); e < 300; e += 7 {
		r, lease := mem.Borrow(1, e)
		if lease != nil || r.Status != Present || !bytes.Equal(r.Payload, payloadFor(1, e)) {
			t.Fatalf("CrashFS borrow %d = %v lease %v", e, r.Status, lease)
		}
	}
}

// TestBorrowedBytesOutliveSegmentRemoval: readers hold leases on entries of
// ledger 1 while the ledger is deleted and its segments removed (the files
// are gone); the bytes stay valid (touching an unmapped page would crash
// the test) until the last lease is released, and then every mapping of a
// removed segment is unmapped.
func TestBorrowedBytesOutliveSegmentRemoval(t *testing.T) {
	fsys := &mapCountingFS{}
	s, dir := openDisk(t, fsys)
	appendBig(t, s, 1, 0, 40)
	appendBig(t, s, 2, 0, 30) // ledger 2 keeps the later segments live
	var leases []*Lease
	var held [][]byte
	for e := int64(0); e < 30; e++ {
		leases = append(leases, checkBorrowed(t, s, 1, e))
		rb, lease := s.Borrow(1, e) // a second lease on the same bytes
		held, leases = append(held, rb.Payload), append(leases, lease)
	}
	segsBefore, _ := filepath.Glob(filepath.Join(dir, "*.seg"))
	if err := s.Delete(1); err != nil {
		t.Fatal(err)
	}
	segsAfter, _ := filepath.Glob(filepath.Join(dir, "*.seg"))
	if len(segsAfter) >= len(segsBefore) {
		t.Fatalf("no segment removed: %d before, %d after", len(segsBefore), len(segsAfter))
	}
	if r, lease := s.Borrow(1, 0); r.Status != Unknown || lease != nil {
		t.Fatalf("borrow of a deleted ledger = %v", r.Status)
	}
	if fsys.live.Load() == 0 {
		t.Fatal("the leased mappings were unmapped with their segments")
	}
	for e, payload := range held {
		if !bytes.Equal(payload, bigEntry(1, int64(e)).Payload) {
			t.Fatalf("entry %d changed under its lease", e)
		}
	}
	for _, lease := range leases {
		lease.Release()
	}
	// What stays mapped belongs to segments that still hold ledger 2.
	s.mu.Lock()
	stillMapped := int64(len(s.mu.maps))
	s.mu.Unlock()
	if live := fsys.live.Load(); live != stillMapped {
		t.Fatalf("%d mappings live after the last release, %d of live segments", live, stillMapped)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if live := fsys.live.Load(); live != 0 {
		t.Fatalf("%d mappings live after Close", live)
	}
}

// TestBorrowWhileRetentionDeletes: readers borrow, check and release
// entries of every ledger while ledgers are deleted one after another
// (their segments removed under the readers). Run with -race; an access to
// an unmapped segment crashes the test.
func TestBorrowWhileRetentionDeletes(t *testing.T) {
	fsys := &mapCountingFS{}
	s, _ := openDisk(t, fsys)
	const ledgers, entries = 8, 24
	for l := uint64(1); l <= ledgers; l++ {
		appendBig(t, s, l, 0, entries)
	}
	var lent atomic.Int64
	var deleting atomic.Uint64 // ledgers 1..deleting may be gone
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for reader := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			type held struct {
				lease   *Lease
				payload []byte
				want    []byte
			}
			var holding []held
			// release checks the held bytes again, after whatever was
			// deleted meanwhile, then gives them back.
			release := func() bool {
				ok := true
				for _, h := range holding {
					ok = ok && bytes.Equal(h.payload, h.want)
					h.lease.Release()
				}
				holding = holding[:0]
				return ok
			}
			defer release()
			for i := 0; deleting.Load() < ledgers; i++ {
				ledger := uint64(1 + (i+reader)%ledgers)
				entry := int64(i % entries)
				r, lease := s.Borrow(ledger, entry)
				switch {
				case r.Status == Present && !bytes.Equal(r.Payload, bigEntry(ledger, entry).Payload):
					errs <- errors.New("borrowed bytes differ from the appended entry")
					return
				case r.Status != Present && ledger > deleting.Load():
					errs <- errors.New("a live ledger's entry was not present")
					return
				}
				if r.Status != Present {
					lease.Release()
					continue
				}
				if lease.Borrowed() {
					lent.Add(1)
				}
				// Hold leases across deletions, then check the bytes again.
				holding = append(holding, held{lease: lease, payload: r.Payload, want: bigEntry(ledger, entry).Payload})
				if len(holding) == 16 && !release() {
					errs <- errors.New("held bytes changed under their lease")
					return
				}
			}
		}()
	}
	for l := uint64(1); l <= ledgers; l++ {
		deleting.Store(l)
		if err := s.Delete(l); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if lent.Load() == 0 {
		t.Fatal("no entry was lent from a mapping")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if live := fsys.live.Load(); live != 0 {
		t.Fatalf("%d mappings live after every lease was released and the store closed", live)
	}
}

// TestBorrowDetectsCorruptionOfAMappedSegment: a byte of a sealed segment
// flipped on disk after the segment was mapped is seen through the mapping
// (the page cache is shared) and answered UNKNOWN with a *CorruptionError,
// as Read answers it; the damaged bytes are never lent.
func TestBorrowDetectsCorruptionOfAMappedSegment(t *testing.T) {
	fsys := &mapCountingFS{}
	s, dir := openDisk(t, fsys)
	appendBig(t, s, 1, 0, 30)
	checkBorrowed(t, s, 1, 2).Release() // maps the first segment
	pos := s.mu.idx.ledgers[1].entries[3]
	f, err := os.OpenFile(filepath.Join(dir, segmentName(pos.seg)), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{0xff}, int64(pos.off)+RecordHeaderSize+100); err != nil {
		t.Fatal(err)
	}
	f.Close()
	r, lease := s.Borrow(1, 3)
	var corrupt *CorruptionError
	if r.Status != Unknown || lease != nil || !errors.As(r.Err, &corrupt) {
		t.Fatalf("borrow of a damaged entry = %v lease %v err %v, want UNKNOWN with a *CorruptionError", r.Status, lease, r.Err)
	}
	if read := s.Read(1, 3); read.Status != Unknown {
		t.Fatalf("read of the damaged entry = %v", read.Status)
	}
	checkBorrowed(t, s, 1, 4).Release()
}
