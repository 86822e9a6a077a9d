package wal

import (
	"bufio"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

const childDirEnv = "ORDERLOG_WAL_CRASH_CHILD_DIR"

// TestHelperCrashLoadChild is not a test: TestCrashSIGKILLMidLoad runs the test
// binary again with this test selected, as the child process it kills.
func TestHelperCrashLoadChild(t *testing.T) {
	dir := os.Getenv(childDirEnv)
	if dir == "" {
		t.Skip("only runs as TestCrashSIGKILLMidLoad's child process")
	}
	firstLedger, _ := strconv.ParseUint(os.Getenv(childDirEnv+"_LEDGER"), 10, 64)
	s, err := Open(Config{Dir: dir, SegmentSize: 256 << 10})
	if err != nil {
		fmt.Println("open failed:", err)
		os.Exit(2)
	}
	var out sync.Mutex
	report := func(format string, args ...any) {
		out.Lock()
		fmt.Printf(format+"\n", args...)
		out.Unlock()
	}
	report("ready %d", s.Incarnation())
	const writers = 16
	// current[w] is writer w's ledger; a fenced writer moves on to a new
	// ledger, so the load never stops by itself.
	var current [writers]atomic.Uint64
	for w := range writers {
		go func() {
			for ledger := firstLedger + uint64(w); ; ledger += writers {
				current[w].Store(ledger)
				for e := int64(0); ; e++ {
					if err := s.Append(entryFor(ledger, e)); err != nil {
						report("stopped %d %v", ledger, err)
						break
					}
					report("ack %d %d", ledger, e)
				}
			}
		}()
	}
	rng := rand.New(rand.NewSource(int64(firstLedger)))
	for {
		// Fences stop a writer; the parent checks they survive the kill.
		time.Sleep(time.Duration(rng.Intn(20)) * time.Millisecond)
		ledger := current[rng.Intn(writers)].Load()
		st, err := s.Fence(ledger)
		if err == nil {
			report("fence %d %d", ledger, st.Last)
		}
	}
}

// TestCrashSIGKILLMidLoad kills a real process with SIGKILL while 16 writers
// append and fences land, reopens the store and checks the recorded
// history: every acknowledged entry is present with its bytes, every
// returned fence still holds and covers its entries, and no ledger holds
// entries beyond what was written.
func TestCrashSIGKILLMidLoad(t *testing.T) {
	cycles := 3 * soakFactor(t)
	if testing.Short() {
		cycles = 2
	}
	dir := t.TempDir()
	acked := map[uint64]int64{}
	fenced := map[uint64]int64{}
	var incarnation uint64
	for cycle := range cycles {
		first := uint64(cycle*1_000_000 + 1)
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperCrashLoadChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), childDirEnv+"="+dir, fmt.Sprintf("%s_LEDGER=%d", childDirEnv, first))
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := bufio.NewScanner(stdout)
		acks := 0
		target := 500 + rand.Intn(1500)
		for acks < target && lines.Scan() {
			acks += recordChildLine(t, lines.Text(), acked, fenced, &incarnation)
		}
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		for lines.Scan() { // what was printed before the kill
			recordChildLine(t, lines.Text(), acked, fenced, &incarnation)
		}
		cmd.Wait()
		if acks < target {
			t.Fatalf("cycle %d: child stopped after %d acks", cycle, acks)
		}
		s, err := Open(Config{Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		if s.Incarnation() != incarnation {
			t.Fatalf("incarnation changed after SIGKILL under fsync always: %d -> %d", incarnation, s.Incarnation())
		}
		for ledger, last := range acked {
			for e := int64(0); e <= last; e++ {
				expectPresent(t, s, ledger, e)
			}
			got := s.LastEntry(ledger)
			if got.Status != Present || got.Last < last {
				t.Fatalf("ledger %d: last entry %+v, acked up to %d", ledger, got, last)
			}
			if r := s.Read(ledger, got.Last+1); r.Status != Absent {
				t.Fatalf("ledger %d: entry after the last reads %v", ledger, r.Status)
			}
		}
		for ledger, last := range fenced {
			if err := s.Append(entryFor(ledger, s.LastEntry(ledger).Last+1)); err == nil {
				t.Fatalf("ledger %d: fence lost after SIGKILL", ledger)
			}
			for e := int64(0); e <= last; e++ {
				expectPresent(t, s, ledger, e)
			}
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// recordChildLine notes one line of the child's history; it returns 1 for
// an ack.
func recordChildLine(t *testing.T, line string, acked, fenced map[uint64]int64, incarnation *uint64) int {
	f := strings.Fields(line)
	switch {
	case len(f) == 2 && f[0] == "ready":
		inc, _ := strconv.ParseUint(f[1], 10, 64)
		if *incarnation == 0 {
			*incarnation = inc
		} else if inc != *incarnation {
			t.Fatalf("child reopened as incarnation %d, want %d", inc, *incarnation)
		}
	case len(f) == 3 && (f[0] == "ack" || f[0] == "fence"):
		ledger, _ := strconv.ParseUint(f[1], 10, 64)
		entry, _ := strconv.ParseInt(f[2], 10, 64)
		m := acked
		if f[0] == "fence" {
			m = fenced
		}
		if old, ok := m[ledger]; !ok || entry > old {
			m[ledger] = entry
		}
		if f[0] == "ack" {
			return 1
		}
	}
	return 0
}
