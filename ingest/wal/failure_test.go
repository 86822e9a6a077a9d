package wal

import (
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"orderlog/ingest/wal/walfs"
)

// TestFsyncErrorFailsCoveredAppendsAndStopsStore: a failed fdatasync fails
// the appends it covered, every later write is refused, nothing is
// retried, and a reopened store serves what was acknowledged before.
func TestFsyncErrorFailsCoveredAppendsAndStopsStore(t *testing.T) {
	for _, op := range []walfs.Op{walfs.OpSync, walfs.OpWrite} {
		t.Run(map[walfs.Op]string{walfs.OpSync: "fsync", walfs.OpWrite: "write"}[op], func(t *testing.T) {
			fsys := walfs.NewCrashFS(1)
			s := openMem(t, fsys, nil)
			mustAppend(t, s, 1, 0, 5)
			var failures atomic.Int64
			fsys.SetInject(func(o walfs.Op, name string) error {
				if o == op {
					failures.Add(1)
					return walfs.ErrInjected
				}
				return nil
			})
			if err := s.Append(entryFor(1, 5)); !errors.Is(err, ErrStoreFailed) || !errors.Is(err, walfs.ErrInjected) {
				t.Fatalf("append covered by a failed %v: %v", op, err)
			}
			fsys.SetInject(nil)
			if err := s.Append(entryFor(2, 0)); !errors.Is(err, ErrStoreFailed) {
				t.Fatalf("append after failure: %v", err)
			}
			if _, err := s.Fence(1); !errors.Is(err, ErrStoreFailed) {
				t.Fatalf("fence after failure: %v", err)
			}
			if got := failures.Load(); got != 1 {
				t.Fatalf("%d failing calls: the store retried", got)
			}
			expectStatus(t, s, 1, 5, Unknown) // written or not, it is not durable
			expectPresent(t, s, 1, 4)
			s.Close()
			fsys.Crash()
			s = openMem(t, fsys, nil)
			defer s.Close()
			for e := int64(0); e < 5; e++ {
				expectPresent(t, s, 1, e)
			}
			expectStatus(t, s, 1, 5, Absent)
			mustAppend(t, s, 1, 5, 7)
		})
	}
}

// TestGroupCommit holds the first fdatasync while appenders queue up and
// checks that all of them are covered by one further fdatasync.
func TestGroupCommit(t *testing.T) {
	fsys := walfs.NewCrashFS(1)
	s := openMem(t, fsys, func(c *Config) { c.SegmentSize = 1 << 20 })
	defer s.Close()
	release := make(chan struct{})
	started := make(chan struct{})
	var first atomic.Bool
	fsys.SetInject(func(op walfs.Op, name string) error {
		if op == walfs.OpSync && first.CompareAndSwap(false, true) {
			close(started)
			<-release
		}
		return nil
	})
	before := s.Stats()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); mustAppend(t, s, 100, 0, 1) }()
	<-started
	const appenders = 20
	for w := range appenders {
		wg.Add(1)
		go func() { defer wg.Done(); mustAppend(t, s, uint64(w), 0, 1) }()
	}
	for { // wait until every appender has queued its record
		s.mu.Lock()
		queued := s.mu.pending != nil && len(s.mu.pending.chunks[0].metas) == appenders
		s.mu.Unlock()
		if queued {
			break
		}
		runtime.Gosched()
	}
	close(release)
	wg.Wait()
	got := s.Stats()
	if syncs := got.Syncs - before.Syncs; syncs != 2 {
		t.Fatalf("%d fdatasyncs for 1 + %d appends, want 2", syncs, appenders)
	}
	if batches := got.Batches - before.Batches; batches != 2 {
		t.Fatalf("%d batches, want 2", batches)
	}
}

// TestIntervalPolicy: appends return without an fdatasync; fences still
// sync before returning.
func TestIntervalPolicy(t *testing.T) {
	s := openMem(t, walfs.NewCrashFS(1), func(c *Config) { c.SyncInterval = 1 << 40 })
	defer s.Close()
	before := s.Stats()
	mustAppend(t, s, 1, 0, 10)
	if syncs := s.Stats().Syncs - before.Syncs; syncs != 0 {
		t.Fatalf("%d fdatasyncs for appends under the interval policy", syncs)
	}
	if _, err := s.Fence(1); err != nil {
		t.Fatal(err)
	}
	if syncs := s.Stats().Syncs - before.Syncs; syncs != 1 {
		t.Fatalf("%d fdatasyncs after a fence, want 1", syncs)
	}
}

func TestParsePolicy(t *testing.T) {
	for in, want := range map[string]int64{"always": 0, "": 0, "interval=10ms": 10e6} {
		got, err := ParsePolicy(in)
		if err != nil || int64(got) != want {
			t.Fatalf("ParsePolicy(%q) = %v, %v", in, got, err)
		}
	}
	for _, bad := range []string{"sometimes", "interval=", "interval=-1s", "interval=x"} {
		if _, err := ParsePolicy(bad); err == nil {
			t.Fatalf("ParsePolicy(%q) accepted", bad)
		}
	}
}
