package wal

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"testing"

	"orderlog/ingest/wal/walfs"
)

const testDir = "/wal"

func openMem(t *testing.T, fsys *walfs.CrashFS, mod func(*Config)) *Store {
	t.Helper()
	cfg := Config{Dir: testDir, FS: fsys, SegmentSize: 4 << 10}
	if mod != nil {
		mod(&cfg)
	}
	s, err := Open(cfg)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	// A store the test abandoned (a simulated crash) still runs its commit
	// and release loops: stop them once the test is over (ErrClosed for a
	// store the test closed).
	t.Cleanup(func() { s.Close() })
	return s
}

func payloadFor(ledger uint64, entry int64) []byte {
	return []byte(fmt.Sprintf("ledger %d entry %d payload", ledger, entry))
}

func entryFor(ledger uint64, entry int64) Entry {
	return Entry{Ledger: ledger, ID: entry, Span: Span{First: uint64(entry) * 10, End: uint64(entry)*10 + 10},
		LAC: entry - 1, Payload: payloadFor(ledger, entry)}
}

func mustAppend(t *testing.T, s *Store, ledger uint64, from, to int64) {
	t.Helper()
	for e := from; e < to; e++ {
		if err := s.Append(entryFor(ledger, e)); err != nil {
			t.Fatalf("append %d/%d: %v", ledger, e, err)
		}
	}
}

func expectPresent(t *testing.T, s *Store, ledger uint64, entry int64) {
	t.Helper()
	r := s.Read(ledger, entry)
	want := entryFor(ledger, entry)
	if r.Status != Present || !bytes.Equal(r.Payload, want.Payload) || r.Span != want.Span || r.LAC != want.LAC {
		t.Fatalf("read %d/%d = %v %q span %v lac %d err %v, want PRESENT", ledger, entry, r.Status, r.Payload, r.Span, r.LAC, r.Err)
	}
}

func expectStatus(t *testing.T, s *Store, ledger uint64, entry int64, want Status) {
	t.Helper()
	if r := s.Read(ledger, entry); r.Status != want {
		t.Fatalf("read %d/%d = %v (err %v), want %v", ledger, entry, r.Status, r.Err, want)
	}
}

func TestAppendReadReopen(t *testing.T) {
	fsys := walfs.NewCrashFS(1)
	s := openMem(t, fsys, nil)
	inc := s.Incarnation()
	mustAppend(t, s, 1, 0, 100)
	mustAppend(t, s, 2, 0, 50)
	for e := int64(0); e < 100; e++ {
		expectPresent(t, s, 1, e)
	}
	expectStatus(t, s, 1, 100, Absent)
	expectStatus(t, s, 3, 0, Absent)
	if got := s.LastEntry(1); got.Status != Present || got.Last != 99 || got.LAC != 98 {
		t.Fatalf("last entry = %+v", got)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openMem(t, fsys, nil)
	defer s.Close()
	if s.Incarnation() != inc || s.NewIncarnation() {
		t.Fatalf("incarnation changed across a clean reopen: %d -> %d", inc, s.Incarnation())
	}
	for e := int64(0); e < 100; e++ {
		expectPresent(t, s, 1, e)
	}
	for e := int64(0); e < 50; e++ {
		expectPresent(t, s, 2, e)
	}
	mustAppend(t, s, 1, 100, 110)
	expectPresent(t, s, 1, 109)
	if got := s.Ledgers(); len(got) != 2 || got[0] != 1 || got[1] != 2 {
		t.Fatalf("ledgers = %v", got)
	}
}

func TestAppendRules(t *testing.T) {
	s := openMem(t, walfs.NewCrashFS(1), nil)
	defer s.Close()
	mustAppend(t, s, 7, 0, 3)
	var gap *GapError
	if err := s.Append(entryFor(7, 5)); !errors.As(err, &gap) || gap.Next != 3 {
		t.Fatalf("gap append: %v", err)
	}
	if err := s.Append(entryFor(8, 1)); !errors.As(err, &gap) || gap.Next != 0 {
		t.Fatalf("gap append to new ledger: %v", err)
	}
	if err := s.Append(entryFor(7, 1)); err != nil {
		t.Fatalf("identical re-append: %v", err)
	}
	changed := entryFor(7, 1)
	changed.Payload = []byte("other")
	var conflict *ConflictError
	if err := s.Append(changed); !errors.As(err, &conflict) {
		t.Fatalf("conflicting re-append: %v", err)
	}
	changed = entryFor(7, 1)
	changed.Span.End++
	if err := s.Append(changed); !errors.As(err, &conflict) {
		t.Fatalf("re-append with another span: %v", err)
	}
	st, err := s.Fence(7)
	if err != nil || st.Status != Present || st.Last != 2 || st.LAC != 1 {
		t.Fatalf("fence = %+v, %v", st, err)
	}
	if err := s.Append(entryFor(7, 3)); !errors.Is(err, ErrFenced) {
		t.Fatalf("append after fence: %v", err)
	}
	if err := s.RecoveryAppend(entryFor(7, 3)); err != nil {
		t.Fatalf("recovery append after fence: %v", err)
	}
	if err := s.RecoveryAppend(entryFor(7, 2)); err != nil {
		t.Fatalf("identical recovery re-append: %v", err)
	}
	if err := s.CloseLedger(7, 2); err != nil {
		t.Fatal(err)
	}
	expectStatus(t, s, 7, 3, Absent)
	if err := s.RecoveryAppend(entryFor(7, 3)); !errors.Is(err, ErrBeyondClose) {
		t.Fatalf("recovery append beyond close: %v", err)
	}
	if err := s.RecoveryAppend(entryFor(7, 2)); err != nil {
		t.Fatalf("identical recovery re-append within close: %v", err)
	}
	if err := s.Append(entryFor(7, 2)); !errors.Is(err, ErrFenced) {
		t.Fatalf("ordinary append to closed ledger: %v", err)
	}
	if err := s.Append(Entry{Ledger: 9, ID: -1}); !errors.Is(err, ErrInvalidEntry) {
		t.Fatalf("negative entry: %v", err)
	}
	// Fencing a ledger the store never saw creates it fenced and empty.
	st, err = s.Fence(42)
	if err != nil || st.Status != Present || st.Last != -1 || st.LAC != -1 {
		t.Fatalf("fence of new ledger = %+v, %v", st, err)
	}
	if err := s.Append(entryFor(42, 0)); !errors.Is(err, ErrFenced) {
		t.Fatalf("append to fenced new ledger: %v", err)
	}
}

func TestFenceAndCloseSurviveReopen(t *testing.T) {
	fsys := walfs.NewCrashFS(1)
	s := openMem(t, fsys, nil)
	mustAppend(t, s, 1, 0, 5)
	mustAppend(t, s, 2, 0, 5)
	if _, err := s.Fence(1); err != nil {
		t.Fatal(err)
	}
	if err := s.CloseLedger(2, 2); err != nil {
		t.Fatal(err)
	}
	fsys.Crash() // no clean close: the tail is scanned
	s = openMem(t, fsys, nil)
	defer s.Close()
	if err := s.Append(entryFor(1, 5)); !errors.Is(err, ErrFenced) {
		t.Fatalf("append to fenced ledger after crash: %v", err)
	}
	expectPresent(t, s, 2, 2)
	expectStatus(t, s, 2, 3, Absent)
	if got := s.LastEntry(2); got.Last != 2 {
		t.Fatalf("last entry of closed ledger = %+v", got)
	}
}

func TestDeleteRemovesSegments(t *testing.T) {
	fsys := walfs.NewCrashFS(1)
	s := openMem(t, fsys, nil)
	defer s.Close()
	mustAppend(t, s, 1, 0, 300) // several 4 KiB segments
	mustAppend(t, s, 2, 0, 10)
	before, _ := fsys.List(testDir)
	if err := s.Delete(1); err != nil {
		t.Fatal(err)
	}
	after, _ := fsys.List(testDir)
	if len(after) >= len(before) {
		t.Fatalf("no segment removed: before %v after %v", before, after)
	}
	expectStatus(t, s, 1, 0, Unknown)
	expectPresent(t, s, 2, 9)
	if err := s.Append(entryFor(1, 300)); !errors.Is(err, ErrLedgerDeleted) {
		t.Fatalf("append to deleted ledger: %v", err)
	}
	if got := s.Ledgers(); len(got) != 1 || got[0] != 2 {
		t.Fatalf("ledgers = %v", got)
	}
}

func TestConcurrentAppendersGroupCommit(t *testing.T) {
	fsys := walfs.NewCrashFS(1)
	s := openMem(t, fsys, func(c *Config) { c.SegmentSize = 64 << 10 })
	const writers, perWriter = 16, 100
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for e := int64(0); e < perWriter; e++ {
				if err := s.Append(entryFor(uint64(w), e)); err != nil {
					t.Errorf("append: %v", err)
					return
				}
			}
		}()
		wg.Add(1)
		go func() { // concurrent readers of the same ledgers
			defer wg.Done()
			for e := int64(0); e < perWriter; e++ {
				r := s.Read(uint64(w), e)
				if r.Status == Present && !bytes.Equal(r.Payload, payloadFor(uint64(w), e)) {
					t.Errorf("read %d/%d: wrong bytes", w, e)
				}
			}
		}()
	}
	wg.Wait()
	for w := range writers {
		if got := s.LastEntry(uint64(w)); got.Last != perWriter-1 {
			t.Fatalf("ledger %d last = %+v", w, got)
		}
	}
	s.Close()
	s = openMem(t, fsys, nil)
	defer s.Close()
	for w := range writers {
		for e := int64(0); e < perWriter; e++ {
			expectPresent(t, s, uint64(w), e)
		}
	}
}

func TestDirectoryLock(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(Config{Dir: dir}); !errors.Is(err, ErrLocked) {
		t.Fatalf("second open of a locked directory: %v", err)
	}
	mustAppend(t, s, 1, 0, 3)
	s.Close()
	s, err = Open(Config{Dir: dir})
	if err != nil {
		t.Fatalf("open after close: %v", err)
	}
	defer s.Close()
	expectPresent(t, s, 1, 2)
}

// TestDeleteRemovesMiddleSegments: a long-lived ledger does not pin the
// segments between its records once the ledgers written there are deleted,
// and neither a crash nor a clean reopen brings the deleted ledger back.
func TestDeleteRemovesMiddleSegments(t *testing.T) {
	for _, crash := range []bool{false, true} {
		fsys := walfs.NewCrashFS(1)
		s := openMem(t, fsys, nil)
		mustAppend(t, s, 1, 0, 10)  // segment 0
		mustAppend(t, s, 2, 0, 300) // several segments
		mustAppend(t, s, 1, 10, 80) // ledger 1 again, in later segments
		segsBefore := len(s.mu.segments)
		if err := s.Delete(2); err != nil {
			t.Fatal(err)
		}
		s.mu.Lock()
		segsAfter := len(s.mu.segments)
		first := s.mu.segments[0]
		s.mu.Unlock()
		if segsAfter >= segsBefore-2 || first != 0 {
			t.Fatalf("segments %d -> %d (first %d): middle segments not removed", segsBefore, segsAfter, first)
		}
		if crash {
			fsys.Crash()
		} else {
			s.Close()
		}
		s = openMem(t, fsys, nil)
		for e := int64(0); e < 80; e++ {
			expectPresent(t, s, 1, e)
		}
		expectStatus(t, s, 2, 0, Unknown)
		expectStatus(t, s, 2, 299, Unknown)
		if err := s.Append(entryFor(2, 0)); !errors.Is(err, ErrLedgerDeleted) {
			t.Fatalf("crash=%v: deleted ledger came back: %v", crash, err)
		}
		s.Close()
	}
}
