package wal

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"orderlog/ingest/wal/walfs"
	"orderlog/internal/event"
	"orderlog/internal/fileutil"
	"orderlog/proto/walpb"
)

// fakeDisk is an injected DiskLimits.Stat: a file system whose used
// fraction the test sets.
type fakeDisk struct {
	mu       sync.Mutex
	fraction float64
	calls    atomic.Int64
	called   chan struct{}
}

func newFakeDisk(fraction float64) *fakeDisk {
	return &fakeDisk{fraction: fraction, called: make(chan struct{}, 64)}
}

func (d *fakeDisk) set(fraction float64) {
	d.mu.Lock()
	d.fraction = fraction
	d.mu.Unlock()
}

func (d *fakeDisk) stat(string) (fileutil.DiskUsage, error) {
	d.calls.Add(1)
	select {
	case d.called <- struct{}{}:
	default:
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	const total = 1 << 30
	used := uint64(d.fraction * total)
	return fileutil.DiskUsage{Total: total, Used: used, Avail: total - used}, nil
}

// The marks latch with hysteresis: Full from the high-water mark, Hard
// from the hard mark, both until the disk falls below the low-water mark.
func TestDiskMarksHysteresis(t *testing.T) {
	limits := DiskLimits{}
	if err := limits.Validate(); err != nil {
		t.Fatal(err)
	}
	if limits.HighWater != 0.90 || limits.LowWater != 0.85 || limits.HardWater != 0.95 {
		t.Fatalf("default marks %v/%v/%v, want 0.85/0.90/0.95", limits.LowWater, limits.HighWater, limits.HardWater)
	}
	m := diskMarks{limits: limits}
	steps := []struct {
		fraction   float64
		full, hard bool
		changed    bool
	}{
		{0.50, false, false, false},
		{0.8999, false, false, false},
		{0.90, true, false, true},  // high-water: refuse new messages
		{0.87, true, false, false}, // between the marks: still full
		{0.96, true, true, false},  // hard mark: the store refuses too
		{0.91, true, true, false},  // still hard until below low-water
		{0.85, true, true, false},  // the low-water mark itself is not below it
		{0.8499, false, false, true},
		{0.89, false, false, false}, // rising again: not full before high-water
		{0.97, true, true, true},    // straight past both marks
		{0.10, false, false, true},
	}
	for i, s := range steps {
		changed := m.observe(s.fraction)
		if m.full != s.full || m.hard != s.hard || changed != s.changed {
			t.Fatalf("step %d (%v): full %v hard %v changed %v, want %v %v %v", i, s.fraction, m.full, m.hard, changed, s.full, s.hard, s.changed)
		}
	}
}

func TestDiskLimitsValidate(t *testing.T) {
	for name, c := range map[string]struct {
		limits DiskLimits
		ok     bool
	}{
		"default":             {DiskLimits{}, true},
		"high_only":           {DiskLimits{HighWater: 0.5}, true},
		"full_only_when_full": {DiskLimits{HighWater: 1}, true},
		"high_above_one":      {DiskLimits{HighWater: 1.2}, false},
		"negative_high":       {DiskLimits{HighWater: -0.1}, false},
		"low_above_high":      {DiskLimits{HighWater: 0.8, LowWater: 0.85}, false},
		"hard_below_high":     {DiskLimits{HighWater: 0.8, HardWater: 0.7}, false},
		"negative_period":     {DiskLimits{SampleEvery: -time.Second}, false},
	} {
		err := c.limits.Validate()
		if (err == nil) != c.ok {
			t.Errorf("%s: validate %+v: %v", name, c.limits, err)
		}
	}
}

func openWithDisk(t *testing.T, disk *fakeDisk, mod func(*Config)) *Store {
	return openMem(t, walfs.NewCrashFS(1), func(c *Config) {
		c.Disk = DiskLimits{Stat: disk.stat, SampleEvery: time.Hour}
		if mod != nil {
			mod(c)
		}
	})
}

// addRemote appends one entry as another node's writer does, over gRPC,
// and returns its result.
func addRemote(t *testing.T, client walpb.WALClient, inc, ledger uint64, entry int64, recovery bool) *walpb.AddResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := client.AddEntries(ctx)
	if err != nil {
		t.Fatal(err)
	}
	e := addEntry(inc, ledger, entry)
	e.Recovery = recovery
	if err := stream.Send(&walpb.AddEntriesRequest{Entries: []*walpb.AddEntry{e}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	stream.CloseSend()
	return resp.Results[0]
}

// Above the hard mark the store refuses appends that would create a
// ledger and every ordinary append of another node's writer, with a typed
// error; its own node's writer finishes its ledger, recovery and fences go
// through, and nothing it held is touched. Below the low-water mark every
// append works again.
func TestHardMarkRefusesNewLedgersAndRemoteAppends(t *testing.T) {
	disk := newFakeDisk(0.5)
	s := openWithDisk(t, disk, nil)
	remote := serveTest(t, s)
	inc := s.Incarnation()
	mustAppend(t, s, 1, 0, 3)
	mustAppend(t, s, 2, 0, 1)

	disk.set(0.96)
	if st := s.SampleDisk(); !st.Full || !st.Hard || !s.DiskFull() {
		t.Fatalf("disk at 96%%: %+v (DiskFull %v), want full and hard", st, s.DiskFull())
	}
	var full *DiskFullError
	if err := s.Append(entryFor(3, 0)); !errors.As(err, &full) || !errors.Is(err, ErrDiskFull) || full.Mark != 0.95 {
		t.Fatalf("new ledger above the hard mark: %v, want a *DiskFullError at 0.95", err)
	}
	mustAppend(t, s, 1, 3, 5) // this node's writer finishes what it has in flight
	if r := addRemote(t, remote, inc, 2, 1, false); r.Code != walpb.AddCode_ADD_STORE_FAILED || !strings.Contains(r.Message, "hard mark") {
		t.Fatalf("remote append above the hard mark: %v", r)
	}
	if r := addRemote(t, remote, inc, 4, 0, true); r.Code != walpb.AddCode_ADD_STORE_FAILED {
		t.Fatalf("a copy creating a ledger above the hard mark: %v", r)
	}
	if _, err := s.Fence(2); err != nil {
		t.Fatalf("fence above the hard mark: %v", err)
	}
	if r := addRemote(t, remote, inc, 2, 1, true); r.Code != walpb.AddCode_ADD_OK {
		t.Fatalf("recovery roll-forward of a held ledger above the hard mark: %v", r)
	}
	if err := s.CloseLedger(2, 1); err != nil {
		t.Fatalf("close above the hard mark: %v", err)
	}
	if s.Failed() != nil {
		t.Fatalf("refusals failed the store: %v", s.Failed())
	}

	disk.set(0.88) // below the high-water mark, not yet below the low-water mark
	if st := s.SampleDisk(); !st.Full || !st.Hard {
		t.Fatalf("disk at 88%% after 96%%: %+v, want still full (hysteresis)", st)
	}
	disk.set(0.80)
	if st := s.SampleDisk(); st.Full || st.Hard || s.DiskFull() {
		t.Fatalf("disk at 80%%: %+v (DiskFull %v), want room", st, s.DiskFull())
	}
	mustAppend(t, s, 3, 0, 2)
	if r := addRemote(t, remote, inc, 1, 5, false); r.Code != walpb.AddCode_ADD_OK {
		t.Fatalf("remote append below the low-water mark: %v", r)
	}
	for e := int64(0); e < 6; e++ {
		expectPresent(t, s, 1, e)
	}
	expectPresent(t, s, 2, 1)
}

// The watch samples every SampleBytes of journal written, not only every
// period, so a fast writer cannot run far past a mark between samples.
func TestDiskIsSampledAfterSampleBytes(t *testing.T) {
	disk := newFakeDisk(0.5)
	s := openWithDisk(t, disk, func(c *Config) { c.Disk.SampleBytes = 1 << 10 })
	<-disk.called // the sample at Open
	disk.set(0.99)
	for e := int64(0); !s.Disk().Hard; e++ {
		if e > 1000 {
			t.Fatalf("%d appends (about 50 KiB) and no sample: %+v", e, s.Disk())
		}
		if err := s.Append(entryFor(1, e)); err != nil && !errors.Is(err, ErrDiskFull) {
			t.Fatal(err)
		}
		select {
		case <-disk.called:
		case <-time.After(time.Millisecond):
		}
	}
}

// Deleting a ledger samples the disk at once: writes resume as soon as
// retention freed the space.
func TestDeleteSamplesTheDisk(t *testing.T) {
	disk := newFakeDisk(0.97)
	s := openWithDisk(t, disk, nil)
	if !s.Disk().Hard {
		t.Fatalf("opened at 97%%: %+v", s.Disk())
	}
	disk.set(0.5)
	if err := s.Delete(7); err != nil {
		t.Fatal(err)
	}
	if st := s.Disk(); st.Full {
		t.Fatalf("after a delete freed space: %+v", st)
	}
	mustAppend(t, s, 8, 0, 1)
}

// The listener hears each crossing once, not each sample.
func TestDiskFullEventOncePerCrossing(t *testing.T) {
	disk := newFakeDisk(0.5)
	var mu sync.Mutex
	var seen []event.DiskInfo
	s := openWithDisk(t, disk, func(c *Config) {
		c.Events.DiskFull = func(i event.DiskInfo) { mu.Lock(); seen = append(seen, i); mu.Unlock() }
	})
	for _, f := range []float64{0.91, 0.93, 0.96, 0.86, 0.84, 0.80, 0.92} {
		disk.set(f)
		s.SampleDisk()
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 3 || !seen[0].Full || seen[0].Mark != 0.90 || seen[1].Full || seen[1].Mark != 0.85 || !seen[2].Full {
		t.Fatalf("events %+v, want full at 0.91, room at 0.84, full at 0.92", seen)
	}
}

// A platform that cannot stat the disk never counts as full.
func TestUnsupportedDiskStatIsNeverFull(t *testing.T) {
	s := openMem(t, walfs.NewCrashFS(1), func(c *Config) {
		c.Disk.Stat = func(string) (fileutil.DiskUsage, error) { return fileutil.DiskUsage{}, errors.ErrUnsupported }
	})
	if st := s.SampleDisk(); st.Full || !errors.Is(st.Err, errors.ErrUnsupported) {
		t.Fatalf("%+v", st)
	}
	mustAppend(t, s, 1, 0, 1)
}

// JournalBytes is the length of the segment files.
func TestJournalBytes(t *testing.T) {
	s := openMem(t, walfs.NewCrashFS(1), nil)
	before := s.JournalBytes()
	mustAppend(t, s, 1, 0, 200) // several 4 KiB segments
	after := s.JournalBytes()
	if after-before < int64(200*len(payloadFor(1, 100))) {
		t.Fatalf("journal %d bytes before, %d after 200 entries", before, after)
	}
}
