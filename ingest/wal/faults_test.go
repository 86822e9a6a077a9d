package wal

import (
	"errors"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"orderlog/ingest/wal/walfs"
)

// Tests of the store on a walfs.ErrorFS over a CrashFS: reads, opens,
// removes and syncs that fail or take long.

func openOn(t *testing.T, fsys walfs.FS, mod func(*Config)) (*Store, error) {
	t.Helper()
	cfg := Config{Dir: testDir, FS: fsys, SegmentSize: 4 << 10}
	if mod != nil {
		mod(&cfg)
	}
	return Open(cfg)
}

func mustOpenOn(t *testing.T, fsys walfs.FS) *Store {
	t.Helper()
	s, err := openOn(t, fsys, nil)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return s
}

// A segment that cannot be read while the store recovers fails Open with
// the I/O error (no panic, no store that answers from half a journal);
// once the disk reads again, everything acknowledged is there.
func TestSegmentReadErrorDuringRecoveryFailsOpen(t *testing.T) {
	mem := walfs.NewCrashFS(1)
	efs := walfs.NewErrorFS(mem)
	s := mustOpenOn(t, efs)
	mustAppend(t, s, 1, 0, 200) // several 4 KiB segments
	s.Close()
	// Without a checkpoint the segments must be scanned; the scan's read fails.
	efs.AddRule(walfs.Rule{Ops: []walfs.Op{walfs.OpRead}, Path: walfs.Glob("*.idx"), Action: walfs.Fail(syscall.EIO)})
	bad := efs.AddRule(walfs.Rule{Ops: []walfs.Op{walfs.OpRead}, Path: walfs.Glob("*.seg"), Trigger: walfs.Nth(2), Action: walfs.Fail(syscall.EIO)})
	_, err := openOn(t, efs, nil)
	var pe *os.PathError
	if !errors.Is(err, syscall.EIO) || !errors.Is(err, walfs.ErrInjected) || !errors.As(err, &pe) || !strings.HasSuffix(pe.Path, ".seg") {
		t.Fatalf("open with an unreadable segment: %v, want the segment's EIO", err)
	}
	if efs.Hits(bad) != 1 {
		t.Fatalf("the segment read rule fired %d times", efs.Hits(bad))
	}
	efs.Clear()
	s = mustOpenOn(t, efs)
	defer s.Close()
	for e := int64(0); e < 200; e++ {
		expectPresent(t, s, 1, e)
	}
}

// An index checkpoint that cannot be read is only a lost shortcut: the
// store scans the segment instead and answers as before.
func TestUnreadableCheckpointIsScanned(t *testing.T) {
	mem := walfs.NewCrashFS(1)
	efs := walfs.NewErrorFS(mem)
	s := mustOpenOn(t, efs)
	mustAppend(t, s, 1, 0, 200)
	s.Close()
	idx := efs.AddRule(walfs.Rule{Ops: []walfs.Op{walfs.OpOpen, walfs.OpRead}, Path: walfs.Glob("*.idx"), Action: walfs.Fail(syscall.EIO)})
	s = mustOpenOn(t, efs)
	defer s.Close()
	if efs.Hits(idx) == 0 {
		t.Fatal("no checkpoint was read")
	}
	for e := int64(0); e < 200; e++ {
		expectPresent(t, s, 1, e)
	}
	expectStatus(t, s, 1, 200, Absent)
}

// A read that fails, or returns damaged bytes, answers UNKNOWN with the
// reason: never ABSENT and never the damaged payload. The next read, from
// a healthy disk, answers PRESENT.
func TestFailedOrCorruptReadAnswersUnknown(t *testing.T) {
	for name, action := range map[string]walfs.Action{
		"eio":     walfs.Fail(syscall.EIO),
		"bitflip": walfs.FlipBit(),
	} {
		t.Run(name, func(t *testing.T) {
			efs := walfs.NewErrorFS(walfs.NewCrashFS(1))
			s := mustOpenOn(t, efs)
			defer s.Close()
			mustAppend(t, s, 1, 0, 5)
			efs.AddRule(walfs.Rule{Ops: []walfs.Op{walfs.OpRead}, Path: walfs.Glob("*.seg"), Trigger: walfs.Once(), Action: action})
			r := s.Read(1, 3)
			var ce *CorruptionError
			switch {
			case r.Status != Unknown || r.Payload != nil:
				t.Fatalf("read through a %s = %v %q, want UNKNOWN without payload", name, r.Status, r.Payload)
			case name == "eio" && !errors.Is(r.Err, syscall.EIO):
				t.Fatalf("failed read's reason %v, want EIO", r.Err)
			case name == "bitflip" && !errors.As(r.Err, &ce):
				t.Fatalf("corrupt read's reason %v, want a CorruptionError", r.Err)
			}
			expectPresent(t, s, 1, 3)
		})
	}
}

// ENOSPC on a segment write fails the appends it covered and stops the
// store; a reopened store holds exactly what was acknowledged and takes
// appends again.
func TestNoSpaceFailsTheAppendAndReopenIsConsistent(t *testing.T) {
	mem := walfs.NewCrashFS(1)
	efs := walfs.NewErrorFS(mem)
	s := mustOpenOn(t, efs)
	mustAppend(t, s, 1, 0, 10)
	full := efs.AddRule(walfs.Rule{Ops: []walfs.Op{walfs.OpWrite}, Path: walfs.Glob("*.seg"), Action: walfs.Fail(syscall.ENOSPC)})
	if err := s.Append(entryFor(1, 10)); !errors.Is(err, ErrStoreFailed) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("append on a full disk: %v, want ErrStoreFailed with ENOSPC", err)
	}
	if err := s.Append(entryFor(2, 0)); !errors.Is(err, ErrStoreFailed) {
		t.Fatalf("append after the failure: %v", err)
	}
	if efs.Hits(full) != 1 {
		t.Fatalf("%d writes tried on the full disk: the store retried", efs.Hits(full))
	}
	expectPresent(t, s, 1, 9)
	expectStatus(t, s, 1, 10, Unknown)
	s.Close()
	efs.RemoveRule(full) // space freed
	s = mustOpenOn(t, efs)
	defer s.Close()
	for e := int64(0); e < 10; e++ {
		expectPresent(t, s, 1, e)
	}
	expectStatus(t, s, 1, 10, Absent)
	mustAppend(t, s, 1, 10, 12)
	expectStatus(t, s, 2, 0, Absent)
}

// A dead segment whose removal fails is reported by the Delete that
// wanted it gone; the deleted ledger does not come back on reopen, and the
// file goes at a later removal.
func TestFailedSegmentRemovalIsReportedAndRetried(t *testing.T) {
	mem := walfs.NewCrashFS(1)
	efs := walfs.NewErrorFS(mem)
	s := mustOpenOn(t, efs)
	seg0 := s.activeSeq
	mustAppend(t, s, 1, 0, 3)
	next := fillToSegment(t, s, 2, 0, seg0+2) // segment 0 holds ledger 1 and the start of ledger 2
	waitCheckpointed(t, s, seg0+1)
	stuck := efs.AddRule(walfs.Rule{Ops: []walfs.Op{walfs.OpRemove}, Path: walfs.Glob(segmentName(seg0)), Trigger: walfs.Once(), Action: walfs.Fail(syscall.EIO)})
	if err := s.Delete(1); err != nil {
		t.Fatalf("delete 1: %v", err) // segment 0 still holds ledger 2
	}
	err := s.Delete(2)
	if !errors.Is(err, syscall.EIO) || !errors.Is(err, walfs.ErrInjected) {
		t.Fatalf("delete whose segment removal failed: %v, want the EIO", err)
	}
	if efs.Hits(stuck) != 1 {
		t.Fatalf("removal rule fired %d times", efs.Hits(stuck))
	}
	expectStatus(t, s, 1, 0, Unknown)
	expectStatus(t, s, 2, 0, Unknown)
	if names, _ := mem.List(testDir); !slices.Contains(names, segmentName(seg0)) {
		t.Fatalf("segment %s gone although its removal failed: %v", segmentName(seg0), names)
	}
	mustAppend(t, s, 3, 0, 1)
	s.Close()
	s = mustOpenOn(t, efs)
	defer s.Close()
	expectStatus(t, s, 1, 0, Unknown) // not resurrected from the leftover segment
	expectStatus(t, s, 2, 0, Unknown)
	expectStatus(t, s, 2, next-1, Unknown)
	expectPresent(t, s, 3, 0)
	fillToSegment(t, s, 4, 0, s.activeSeq+1)
	if err := s.Delete(4); err != nil {
		t.Fatalf("later delete: %v", err)
	}
	if names, _ := mem.List(testDir); slices.Contains(names, segmentName(seg0)) {
		t.Fatalf("leftover segment %s still there after a later removal: %v", segmentName(seg0), names)
	}
}

// waitCheckpointed waits until segment seq's checkpoint is durable, which
// dead-segment removal waits for too.
func waitCheckpointed(t *testing.T, s *Store, seq uint32) {
	t.Helper()
	for {
		s.mu.Lock()
		done := s.mu.checkpointed >= seq
		s.mu.Unlock()
		if done {
			return
		}
		runtime.Gosched()
	}
}

// A failure at startup is one clear error naming what failed, and leaves
// nothing behind that stops the next Open.
func TestOpenFailureAtStartupIsAClearError(t *testing.T) {
	for name, rule := range map[string]walfs.Rule{
		"mkdir":         {Ops: []walfs.Op{walfs.OpMkdirAll}, Action: walfs.Fail(syscall.EACCES)},
		"cookie_create": {Ops: []walfs.Op{walfs.OpCreate}, Path: walfs.Glob("*.tmp"), Action: walfs.Fail(syscall.ENOSPC)},
		"list":          {Ops: []walfs.Op{walfs.OpList}, Action: walfs.Fail(syscall.EIO)},
		"segment_open":  {Ops: []walfs.Op{walfs.OpOpen}, Path: walfs.Glob("*.seg"), Action: walfs.Fail(syscall.EMFILE)},
		"new_segment":   {Ops: []walfs.Op{walfs.OpCreate}, Path: walfs.Glob("*.seg"), Action: walfs.Fail(syscall.EROFS)},
	} {
		t.Run(name, func(t *testing.T) {
			efs := walfs.NewErrorFS(walfs.NewCrashFS(1))
			s := mustOpenOn(t, efs)
			mustAppend(t, s, 1, 0, 3)
			s.Close()
			id := efs.AddRule(rule)
			_, err := openOn(t, efs, nil)
			if err == nil || !errors.Is(err, walfs.ErrInjected) || !strings.HasPrefix(err.Error(), "wal: ") || !strings.Contains(err.Error(), testDir) {
				t.Fatalf("open: %v, want a wal: error naming the path", err)
			}
			if efs.Hits(id) == 0 {
				t.Fatal("the rule never fired")
			}
			efs.Clear()
			s = mustOpenOn(t, efs)
			defer s.Close()
			expectPresent(t, s, 1, 2)
		})
	}
}

// Latency on fdatasync makes group commit put more appends in one batch:
// while the first sync takes long, every other appender queues, and one
// more sync covers them all. The latency is an injected sleep that lasts
// until they have queued, so the test counts batches, not milliseconds.
func TestSlowSyncBatchesMore(t *testing.T) {
	efs := walfs.NewErrorFS(walfs.NewCrashFS(1))
	s := mustOpenOn(t, efs)
	defer s.Close()
	const appenders = 30
	started := make(chan struct{})
	var once sync.Once
	efs.SetSleep(func(time.Duration) {
		once.Do(func() { close(started) })
		for !pendingRecords(s, appenders) {
			runtime.Gosched()
		}
	})
	slow := efs.AddRule(walfs.Rule{Ops: []walfs.Op{walfs.OpSync}, Path: walfs.Glob("*.seg"), Trigger: walfs.Once(), Action: walfs.Delay(10 * time.Millisecond)})
	before := s.Stats()
	var wg sync.WaitGroup
	wg.Add(1)
	firstDone := make(chan struct{})
	go func() { defer wg.Done(); defer close(firstDone); mustAppend(t, s, 100, 0, 1) }()
	select {
	case <-started:
	case <-firstDone:
		t.Fatal("the first append's fdatasync was not slowed down")
	}
	for w := range appenders {
		wg.Add(1)
		go func() { defer wg.Done(); mustAppend(t, s, uint64(w), 0, 1) }()
	}
	wg.Wait()
	got := s.Stats()
	if efs.Hits(slow) != 1 {
		t.Fatalf("slow sync rule fired %d times", efs.Hits(slow))
	}
	if b, n := got.Batches-before.Batches, got.Syncs-before.Syncs; b != 2 || n != 2 {
		t.Fatalf("%d batches and %d fdatasyncs for 1 + %d appends behind a slow sync, want 2 and 2", b, n, appenders)
	}
}

func pendingRecords(s *Store, n int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.pending != nil && len(s.mu.pending.chunks[0].metas) == n
}
