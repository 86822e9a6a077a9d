package walfs

import (
	"errors"
	"io"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"
)

func newErrorMem(t *testing.T) (*ErrorFS, *CrashFS) {
	t.Helper()
	mem := NewCrashFS(1)
	if err := mem.MkdirAll("/d"); err != nil {
		t.Fatal(err)
	}
	return NewErrorFS(mem), mem
}

func writeFile(t *testing.T, fsys FS, name, data string) {
	t.Helper()
	f, err := fsys.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte(data)); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// An injected error looks like the OS's (an *os.PathError carrying the
// errno) and is recognisable as injected; the failed call has no effect.
func TestErrorFSFailIsAPathErrorWithoutEffect(t *testing.T) {
	e, mem := newErrorMem(t)
	writeFile(t, e, "/d/a.seg", "abc")
	id := e.AddRule(Rule{Ops: []Op{OpWrite}, Action: Fail(syscall.ENOSPC)})
	f, err := e.OpenAppend("/d/a.seg")
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.Write([]byte("def"))
	var pe *os.PathError
	if !errors.As(err, &pe) || pe.Op != "write" || pe.Path != "/d/a.seg" {
		t.Fatalf("write error %v (%T), want *os.PathError for write /d/a.seg", err, err)
	}
	if !errors.Is(err, syscall.ENOSPC) || !errors.Is(err, ErrInjected) {
		t.Fatalf("write error %v: want ENOSPC and ErrInjected", err)
	}
	if size, _ := f.Size(); size != 3 {
		t.Fatalf("size %d after a failed write, want 3", size)
	}
	e.RemoveRule(id)
	if _, err := f.Write([]byte("def")); err != nil {
		t.Fatalf("write after the rule was removed: %v", err)
	}
	if e.Hits(id) != 1 {
		t.Fatalf("%d hits, want 1", e.Hits(id))
	}
	f.Close()
	if names, _ := mem.List("/d"); len(names) != 1 {
		t.Fatalf("files %v", names)
	}
}

// Every operation of the interface can be matched, and the path matcher
// and operation set narrow a rule down.
func TestErrorFSMatchesEveryOperation(t *testing.T) {
	e, _ := newErrorMem(t)
	writeFile(t, e, "/d/a.seg", "abc")
	writeFile(t, e, "/d/a.idx", "abc")
	calls := map[Op]func() error{
		OpCreate:      func() error { _, err := e.Create("/d/a.seg"); return err },
		OpOpen:        func() error { _, err := e.Open("/d/a.seg"); return err },
		OpOpenAppend:  func() error { _, err := e.OpenAppend("/d/a.seg"); return err },
		OpRemove:      func() error { return e.Remove("/d/a.seg") },
		OpRename:      func() error { return e.Rename("/d/a.idx", "/d/a.seg") },
		OpList:        func() error { _, err := e.List("/d/a.seg"); return err },
		OpMkdirAll:    func() error { return e.MkdirAll("/d/a.seg") },
		OpSyncDir:     func() error { return e.SyncDir("/d/a.seg") },
		OpRead:        fileCall(e, func(f File) error { _, err := f.ReadAt(make([]byte, 1), 0); return err }),
		OpWrite:       fileCall(e, func(f File) error { _, err := f.Write([]byte("x")); return err }),
		OpSync:        fileCall(e, func(f File) error { return f.Sync() }),
		OpTruncate:    fileCall(e, func(f File) error { return f.Truncate(1) }),
		OpSize:        fileCall(e, func(f File) error { _, err := f.Size(); return err }),
		OpDropCache:   fileCall(e, func(f File) error { return f.DropCache() }),
		OpPreallocate: fileCall(e, func(f File) error { return f.Preallocate(10) }),
		OpClose:       fileCall(e, func(f File) error { return f.Close() }),
	}
	for op, call := range calls {
		t.Run(op.String(), func(t *testing.T) {
			other := e.AddRule(Rule{Ops: []Op{op}, Path: Glob("*.other"), Action: Fail(nil)})
			id := e.AddRule(Rule{Ops: []Op{op}, Path: Glob("/d/*.seg"), Trigger: Once(), Action: Fail(syscall.EIO)})
			defer e.RemoveRule(id)
			defer e.RemoveRule(other)
			if err := call(); !errors.Is(err, syscall.EIO) {
				t.Fatalf("%v: %v, want injected EIO", op, err)
			}
			if e.Hits(other) != 0 {
				t.Fatalf("a rule for another path fired")
			}
		})
	}
}

// fileCall opens /d/a.seg for appending without any rule and runs call on it.
func fileCall(e *ErrorFS, call func(File) error) func() error {
	return func() error {
		e.mu.Lock()
		rules := e.mu.rules
		e.mu.rules = nil
		e.mu.Unlock()
		f, err := e.OpenAppend("/d/a.seg")
		e.mu.Lock()
		e.mu.rules = rules
		e.mu.Unlock()
		if err != nil {
			return err
		}
		return call(f)
	}
}

func TestErrorFSTriggers(t *testing.T) {
	e, _ := newErrorMem(t)
	failures := func(n int) []bool {
		var got []bool
		for range n {
			got = append(got, e.MkdirAll("/d") != nil)
		}
		return got
	}
	for name, tc := range map[string]struct {
		trigger Trigger
		want    []bool
	}{
		"always":    {Always(), []bool{true, true, true, true}},
		"once":      {Once(), []bool{true, false, false, false}},
		"third":     {Nth(3), []bool{false, false, true, false}},
		"from_2nd":  {FromNth(2), []bool{false, true, true, true}},
		"never_p=0": {Probability(0, 1), []bool{false, false, false, false}},
	} {
		t.Run(name, func(t *testing.T) {
			id := e.AddRule(Rule{Ops: []Op{OpMkdirAll}, Trigger: tc.trigger, Action: Fail(nil)})
			defer e.RemoveRule(id)
			got := failures(len(tc.want))
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("failures %v, want %v", got, tc.want)
				}
			}
		})
	}
}

// The same seed makes the same decisions for the same sequence of calls;
// another seed makes others.
func TestErrorFSProbabilityIsDeterministic(t *testing.T) {
	run := func(seed uint64) []bool {
		e, _ := newErrorMem(t)
		e.AddRule(Rule{Ops: []Op{OpMkdirAll}, Trigger: Probability(0.5, seed), Action: Fail(nil)})
		var got []bool
		for range 200 {
			got = append(got, e.MkdirAll("/d") != nil)
		}
		return got
	}
	a, b, c := run(7), run(7), run(8)
	fails, same := 0, true
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("seed 7 decided %v then %v at call %d", a[i], b[i], i)
		}
		if a[i] {
			fails++
		}
		same = same && a[i] == c[i]
	}
	if fails < 60 || fails > 140 || same {
		t.Fatalf("%d of 200 failed with p=0.5 (seed 8 the same: %v)", fails, same)
	}
}

// Delays go through the injected sleep, not the wall clock.
func TestErrorFSDelayUsesTheInjectedSleep(t *testing.T) {
	e, _ := newErrorMem(t)
	writeFile(t, e, "/d/a.seg", "abc")
	var slept []time.Duration
	e.SetSleep(func(d time.Duration) { slept = append(slept, d) })
	e.AddRule(Rule{Ops: []Op{OpSync}, Action: Delay(time.Hour)})
	e.AddRule(Rule{Ops: []Op{OpSync}, Trigger: Once(), Action: Delay(time.Minute)})
	f, err := e.OpenAppend("/d/a.seg")
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	if len(slept) != 2 || slept[0] != time.Hour+time.Minute || slept[1] != time.Hour {
		t.Fatalf("slept %v, want [1h1m 1h]", slept)
	}
}

// A corrupted read changes what the caller sees, not the file.
func TestErrorFSCorruptRead(t *testing.T) {
	e, mem := newErrorMem(t)
	writeFile(t, e, "/d/a.seg", "abcdef")
	e.AddRule(Rule{Ops: []Op{OpRead}, Path: Glob("a.seg"), Trigger: Once(), Action: FlipBit()})
	f, err := e.Open("/d/a.seg")
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 3)
	if _, err := f.ReadAt(buf, 2); err != nil || string(buf) != "bde" {
		t.Fatalf("corrupted read %q, %v; want \"bde\"", buf, err)
	}
	if _, err := f.ReadAt(buf, 2); err != nil || string(buf) != "cde" {
		t.Fatalf("second read %q, %v; want the file's \"cde\"", buf, err)
	}
	g, _ := mem.Open("/d/a.seg")
	if n, err := g.ReadAt(make([]byte, 10), 0); n != 6 || err != io.EOF {
		t.Fatalf("underlying read %d, %v", n, err)
	}
}

// Over a CrashFS, a failed sync leaves the write undurable: a crash drops it.
func TestErrorFSComposesWithCrashFS(t *testing.T) {
	e, mem := newErrorMem(t)
	writeFile(t, e, "/d/a.seg", "abc")
	if err := e.SyncDir("/d"); err != nil {
		t.Fatal(err)
	}
	e.AddRule(Rule{Ops: []Op{OpSync}, Action: Fail(syscall.EIO)})
	f, _ := e.OpenAppend("/d/a.seg")
	if _, err := f.Write([]byte("def")); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("sync: %v", err)
	}
	mem.Crash()
	g, err := e.Open("/d/a.seg")
	if err != nil {
		t.Fatal(err)
	}
	if size, _ := g.Size(); size != 3 {
		t.Fatalf("size %d after the crash, want the synced 3", size)
	}
}

// Rules come and go while other goroutines use the filesystem (run with
// -race).
func TestErrorFSRulesChangeWhileInUse(t *testing.T) {
	e, _ := newErrorMem(t)
	writeFile(t, e, "/d/a.seg", "abc")
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f, err := e.Open("/d/a.seg")
			for err != nil {
				f, err = e.Open("/d/a.seg")
			}
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, _ = f.ReadAt(make([]byte, 3), 0)
				_, _ = e.List("/d")
			}
		}()
	}
	for i := range 200 {
		id := e.AddRule(Rule{Ops: []Op{OpRead, OpList, OpOpen}, Trigger: Probability(0.5, uint64(i)), Action: Fail(nil)})
		e.AddRule(Rule{Ops: []Op{OpRead}, Action: FlipBit()})
		e.RemoveRule(id)
		e.Clear()
	}
	close(stop)
	wg.Wait()
}
