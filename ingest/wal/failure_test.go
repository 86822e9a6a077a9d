package wal

import (
	"errors"
	"path"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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
	for in, want := range map[string]Policy{
		"always": {}, "": {SyncDelay: 150 * time.Microsecond}, "interval=10ms": {SyncInterval: 10 * time.Millisecond},
		"always,delay=150us": {SyncDelay: 150 * time.Microsecond}, "always,delay=0s": {},
	} {
		got, err := ParsePolicy(in)
		if err != nil || got != want {
			t.Fatalf("ParsePolicy(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, bad := range []string{"sometimes", "interval=", "interval=-1s", "interval=x",
		"always,delay=", "always,delay=-1ms", "always,delay=1s", "delay=1ms", "interval=1s,delay=1ms"} {
		if _, err := ParsePolicy(bad); err == nil {
			t.Fatalf("ParsePolicy(%q) accepted", bad)
		}
	}
}

// TestSyncDelay: with a sync delay, an append still returns only once the
// fdatasync covering it is done (a crash loses none), continuous appends
// get at most one flush per delay, and an append after a quiet delay is not
// held back.
func TestSyncDelay(t *testing.T) {
	const delay = 80 * time.Millisecond
	fsys := walfs.NewCrashFS(1)
	s := openMem(t, fsys, func(c *Config) { c.SyncDelay = delay; c.SegmentSize = 1 << 20 })
	before := s.Stats()
	start := time.Now()
	acked := make([]int64, 4) // per appender: entries 0..acked[w]-1 of ledger w+1 returned
	var wg sync.WaitGroup
	for w := range acked {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for e := int64(0); time.Since(start) < 8*delay; e++ {
				if err := s.Append(entryFor(uint64(w+1), e)); err != nil {
					t.Error(err)
					return
				}
				acked[w] = e + 1
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if syncs, most := s.Stats().Syncs-before.Syncs, int64(elapsed/delay)+2; syncs > most {
		t.Fatalf("%d fdatasyncs in %s with a %s delay, want at most %d", syncs, elapsed, delay, most)
	}

	if s.Stats().DelayedSyncs == before.DelayedSyncs {
		t.Fatal("continuous appends were never held back by the delay")
	}
	time.Sleep(2 * delay)
	quiet := s.Stats()
	mustAppend(t, s, 9, 0, 1)
	if after := s.Stats(); after.DelayedSyncs != quiet.DelayedSyncs {
		t.Fatalf("an append after a quiet %s was held back by the delay", 2*delay)
	}

	fsys.Crash() // unsynced data is gone; every returned append must not be
	s = openMem(t, fsys, nil)
	defer s.Close()
	for w, n := range acked {
		for e := int64(0); e < n; e++ {
			expectPresent(t, s, uint64(w+1), e)
		}
	}
	expectPresent(t, s, 9, 0)
}

// TestSyncDelaySkipsAFullBatch: a batch that gathered syncDelayFullBytes
// while the previous one was synced is written at once, not after the
// delay (at the peak rate the delay only cost throughput).
func TestSyncDelaySkipsAFullBatch(t *testing.T) {
	const delay = 100 * time.Millisecond
	fsys := walfs.NewCrashFS(1)
	s := openMem(t, fsys, func(c *Config) { c.SyncDelay = delay; c.SegmentSize = 64 << 20 })
	defer s.Close()
	syncing, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	fsys.SetInject(func(op walfs.Op, name string) error {
		if op == walfs.OpSync && path.Ext(name) == segmentSuffix {
			once.Do(func() { close(syncing); <-release }) // holds the first sync
		}
		return nil
	})
	first := s.AppendAsync(entryFor(1, 0), false)
	<-syncing
	// While that sync runs, the next batch fills up.
	payload := make([]byte, 64<<10)
	var tickets []*Ticket
	for e := int64(1); len(tickets)*len(payload) < syncDelayFullBytes+len(payload); e++ {
		tickets = append(tickets, s.AppendAsync(Entry{Ledger: 1, ID: e, LAC: e - 1, Payload: payload}, false))
	}
	before := s.Stats()
	close(release)
	if err := first.Wait(); err != nil {
		t.Fatal(err)
	}
	for _, ticket := range tickets {
		if err := ticket.Wait(); err != nil {
			t.Fatal(err)
		}
	}
	if after := s.Stats(); after.DelayedSyncs != before.DelayedSyncs || after.Batches == before.Batches {
		t.Fatalf("a full batch was held back by the delay (%d delayed of %d batches after the held sync)",
			after.DelayedSyncs-before.DelayedSyncs, after.Batches-before.Batches)
	}
}

// failAndCount makes every op on fsys fail with ErrInjected and returns how
// many times it was tried on a file (by base name).
func failAndCount(fsys *walfs.CrashFS, op walfs.Op) func(name string) int {
	var mu sync.Mutex
	count := map[string]int{}
	fsys.SetInject(func(o walfs.Op, name string) error {
		if o != op {
			return nil
		}
		mu.Lock()
		defer mu.Unlock()
		count[path.Base(name)]++
		return walfs.ErrInjected
	})
	return func(name string) int {
		mu.Lock()
		defer mu.Unlock()
		return count[name]
	}
}

// TestEverySegmentIsPreallocated: the store reserves the blocks of every
// segment it creates, once, and a failing reservation changes nothing: it
// is advice (appends then allocate as they go).
func TestEverySegmentIsPreallocated(t *testing.T) {
	fsys := walfs.NewCrashFS(1)
	preallocated := failAndCount(fsys, walfs.OpPreallocate)
	s := openMem(t, fsys, nil) // 4 KiB segments
	mustAppend(t, s, 1, 0, 400)
	s.mu.Lock()
	segments := slices.Clone(s.mu.segments)
	s.mu.Unlock()
	if len(segments) < 3 {
		t.Fatalf("%d segments: the test needs rolls", len(segments))
	}
	for e := int64(0); e < 400; e++ {
		expectPresent(t, s, 1, e)
	}
	for _, seq := range segments {
		if n := preallocated(segmentName(seq)); n != 1 {
			t.Errorf("segment %d preallocated %d times, want once", seq, n)
		}
	}
}

// TestSealedSegmentsGiveBackTheirReservation: the active segment has its
// blocks reserved; one sealed by a roll keeps less than a record's worth of
// them, and one sealed before it filled (by Close, or by the recovery after
// a crash) keeps none.
func TestSealedSegmentsGiveBackTheirReservation(t *testing.T) {
	fsys := walfs.NewCrashFS(1)
	s := openMem(t, fsys, nil) // 4 KiB segments
	active := func(s *Store) uint32 {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.mu.segments[len(s.mu.segments)-1]
	}
	reserved := func(seq uint32) int64 { return fsys.ReservedBeyondEnd(s.path(segmentName(seq))) }
	if r := reserved(active(s)); r < 4<<10-segmentHeaderSize {
		t.Fatalf("the new active segment has %d bytes reserved", r)
	}
	mustAppend(t, s, 1, 0, 200) // several rolls
	record := int64(RecordHeaderSize + len(payloadFor(1, 199)))
	s.mu.Lock()
	rolled := slices.Clone(s.mu.segments[:len(s.mu.segments)-1])
	s.mu.Unlock()
	for _, seq := range rolled {
		if r := reserved(seq); r >= record {
			t.Errorf("segment %d sealed by a roll keeps %d bytes reserved (a record is %d)", seq, r, record)
		}
	}
	closed := active(s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if r := reserved(closed); r != 0 {
		t.Fatalf("segment %d sealed by Close keeps %d bytes reserved", closed, r)
	}
	s = openMem(t, fsys, nil)
	mustAppend(t, s, 1, 200, 205)
	crashed := active(s)
	fsys.Crash()
	s = openMem(t, fsys, nil)
	defer s.Close()
	if r := reserved(crashed); r != 0 {
		t.Fatalf("segment %d sealed by the recovery after a crash keeps %d bytes reserved", crashed, r)
	}
	for e := int64(0); e < 205; e++ {
		expectPresent(t, s, 1, e)
	}
}

// TestRollLeavesSlowWorkToTheReleaseLoop: a roll does not wait for the
// sealed segment's index checkpoint or its drop from the page cache
// (appends go on while both are held); afterwards every sealed segment has
// its checkpoint and was dropped once (the active one never), and a failing
// drop changes nothing: it is advice.
func TestRollLeavesSlowWorkToTheReleaseLoop(t *testing.T) {
	fsys := walfs.NewCrashFS(1)
	dropped := failAndCount(fsys, walfs.OpDropCache)
	held := &heldFS{FS: fsys, hold: make(chan struct{})}
	s, err := Open(Config{Dir: testDir, FS: held, SegmentSize: 4 << 10}) // a few entries per segment
	if err != nil {
		t.Fatal(err)
	}
	held.armed.Store(true)
	rolls := func() int {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.mu.segments) - 1
	}
	// Appends go on across rolls while the release loop is held (up to the
	// backlog: a roll beyond it would wait).
	next := int64(0)
	for ; rolls() < retiredBacklog; next++ {
		mustAppend(t, s, 1, next, next+1)
	}
	close(held.hold)
	mustAppend(t, s, 1, next, 200)
	s.mu.Lock()
	segments := slices.Clone(s.mu.segments)
	s.mu.Unlock()
	for e := int64(0); e < 200; e++ {
		expectPresent(t, s, 1, e)
	}
	active := segments[len(segments)-1]
	s.mu.Lock()
	for s.mu.checkpointed < active-1 {
		s.checkpoints.Wait()
	}
	s.mu.Unlock()
	for _, seq := range segments[:len(segments)-1] {
		if _, err := fsys.Open(s.path(indexName(seq))); err != nil {
			t.Fatalf("sealed segment %d has no index checkpoint: %v", seq, err)
		}
	}
	if err := s.Close(); err != nil { // waits for the release loop
		t.Fatal(err)
	}
	for _, seq := range segments {
		want := 1
		if seq == active {
			want = 0
		}
		if got := dropped(segmentName(seq)); got != want {
			t.Fatalf("segment %d dropped from the cache %d times, want %d", seq, got, want)
		}
	}
}

// TestCrashBeforeCheckpointsLosesNothing: sealed segments whose checkpoint
// was not yet written when the machine crashed are scanned by the next
// Open, and every acknowledged append is there.
func TestCrashBeforeCheckpointsLosesNothing(t *testing.T) {
	fsys := walfs.NewCrashFS(1)
	held := &heldFS{FS: fsys, hold: make(chan struct{})}
	s, err := Open(Config{Dir: testDir, FS: held, SegmentSize: 4 << 10})
	if err != nil {
		t.Fatal(err)
	}
	held.armed.Store(true)
	next := int64(0)
	for ; ; next++ {
		s.mu.Lock()
		rolls := len(s.mu.segments) - 1
		s.mu.Unlock()
		if rolls >= retiredBacklog {
			break
		}
		mustAppend(t, s, 1, next, next+1)
	}
	fsys.Crash() // the old store is abandoned, its release loop still held
	abandoned := s
	t.Cleanup(func() { close(held.hold); abandoned.Close() }) // its loops end with the test
	s = openMem(t, fsys, nil)
	defer s.Close()
	if len(s.Corruptions()) > 0 {
		t.Fatalf("corruptions after a crash before the checkpoints: %v", s.Corruptions())
	}
	for e := int64(0); e < next; e++ {
		expectPresent(t, s, 1, e)
	}
}

// heldFS is a file system whose DropCache calls and index checkpoint
// writes wait, once armed, until hold is closed (CrashFS's inject hook runs
// under its lock, so it cannot wait).
type heldFS struct {
	walfs.FS
	armed atomic.Bool
	hold  chan struct{}
}

func (h *heldFS) Create(name string) (walfs.File, error) {
	if h.armed.Load() && strings.HasSuffix(name, indexSuffix+".tmp") {
		<-h.hold
	}
	f, err := h.FS.Create(name)
	return heldFile{File: f, fs: h}, err
}

type heldFile struct {
	walfs.File
	fs *heldFS
}

func (f heldFile) DropCache() error {
	if f.fs.armed.Load() {
		<-f.fs.hold
	}
	return f.File.DropCache()
}
