package wal

import (
	"errors"
	"fmt"
	"math/rand"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"orderlog/ingest/wal/walfs"
)

// soakFactor scales randomized runs: 1 normally, less with -short, and
// ORDERLOG_SOAK=<n> for long runs.
func soakFactor(t *testing.T) int {
	if v, err := strconv.Atoi(os.Getenv("ORDERLOG_SOAK")); err == nil && v > 0 {
		return v
	}
	return 1
}

// crashHistory is what the test knows was acknowledged, across cycles.
type crashHistory struct {
	mu sync.Mutex
	// acked[ledger] is the highest entry whose Append returned nil.
	acked map[uint64]int64
	// attempted[ledger] is the highest entry ever passed to Append.
	attempted map[uint64]int64
	// fenced[ledger] is the last entry a returned Fence reported.
	fenced map[uint64]int64
	// closed[ledger] is the last entry of a CloseLedger that returned nil;
	// maybeClosed also has those that failed, which may still have taken
	// effect (a torn tail can keep them).
	closed, maybeClosed map[uint64]int64
	// deleted and maybeDeleted are the same for Delete.
	deleted, maybeDeleted map[uint64]bool
}

// TestCrashRandomized runs cycles of concurrent appends, fences, closes and
// deletes against the crashable filesystem, with injected write and fsync
// errors, then crashes (dropping unsynced data, keeping torn prefixes) and
// reopens. Every append that returned nil must survive with its bytes, every
// returned fence and close must still hold, and nothing beyond what was ever
// written may appear.
func TestCrashRandomized(t *testing.T) {
	cycles := 30 * soakFactor(t)
	if testing.Short() {
		cycles = 10
	}
	for seed := int64(1); seed <= 3; seed++ {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) { runCrashCycles(t, seed, cycles) })
	}
}

func runCrashCycles(t *testing.T, seed int64, cycles int) {
	rng := rand.New(rand.NewSource(seed))
	fsys := walfs.NewCrashFS(seed)
	fsys.SetTorn(true)
	h := &crashHistory{acked: map[uint64]int64{}, attempted: map[uint64]int64{}, fenced: map[uint64]int64{},
		closed: map[uint64]int64{}, deleted: map[uint64]bool{}, maybeClosed: map[uint64]int64{}, maybeDeleted: map[uint64]bool{}}
	for cycle := range cycles {
		s := openMem(t, fsys, func(c *Config) { c.SegmentSize = 8 << 10 })
		verifyHistory(t, s, h)
		midFlight := rng.Intn(3) == 0
		runCrashLoad(t, s, h, rng, cycle, midFlight)
		fsys.SetInject(nil)
		// Failures are recovered by reopening; half the time after a crash.
		switch {
		case midFlight: // crashed already, the store is abandoned
		case rng.Intn(2) == 0:
			fsys.Crash()
		default:
			s.Close()
		}
	}
	s := openMem(t, fsys, nil)
	defer s.Close()
	verifyHistory(t, s, h)
}

// runCrashLoad runs one cycle's load. With midFlight it crashes the
// filesystem while appends, fences and syncs are in flight.
func runCrashLoad(t *testing.T, s *Store, h *crashHistory, rng *rand.Rand, cycle int, midFlight bool) {
	const writers = 4
	ledgers := make([]uint64, writers)
	for w := range ledgers {
		ledgers[w] = uint64(cycle*writers + w + 1)
	}
	var injected atomic.Bool
	if rng.Intn(3) == 0 {
		failAt := int64(1 + rng.Intn(40))
		failOp := walfs.OpSync
		if rng.Intn(2) == 0 {
			failOp = walfs.OpWrite
		}
		var ops atomic.Int64
		s.fs.(*walfs.CrashFS).SetInject(func(op walfs.Op, name string) error {
			if op == failOp && ops.Add(1) == failAt {
				injected.Store(true)
				return walfs.ErrInjected
			}
			return nil
		})
	}
	target := int64(20 + rng.Intn(200))
	var acks atomic.Int64
	reached := make(chan struct{})
	var wg sync.WaitGroup
	for _, ledger := range ledgers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for e := int64(0); ; e++ {
				h.mu.Lock()
				h.attempted[ledger] = e
				h.mu.Unlock()
				if err := s.Append(entryFor(ledger, e)); err != nil {
					return
				}
				h.mu.Lock()
				h.acked[ledger] = e
				h.mu.Unlock()
				if acks.Add(1) == target {
					close(reached)
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	// Fence, close and delete while the writers run.
	for step := 0; ; step++ {
		select {
		case <-reached:
		case <-done:
		default:
			if step%50 == 0 {
				ledger := ledgers[rng.Intn(len(ledgers))]
				switch rng.Intn(3) {
				case 0:
					if st, err := s.Fence(ledger); err == nil {
						h.noteFence(ledger, st.Last)
					}
				case 1:
					if st, err := s.Fence(ledger); err == nil && st.Last >= 0 {
						last := st.Last - 1 // drop the last entry
						h.mu.Lock()
						h.maybeClosed[ledger] = last
						h.mu.Unlock()
						if err := s.CloseLedger(ledger, last); err == nil {
							h.mu.Lock()
							h.closed[ledger] = last
							h.mu.Unlock()
						}
					}
				case 2:
					if cycle > 0 {
						old := uint64(rng.Intn(cycle*len(ledgers)) + 1)
						h.mu.Lock()
						h.maybeDeleted[old] = true
						h.mu.Unlock()
						if err := s.Delete(old); err == nil {
							h.mu.Lock()
							h.deleted[old] = true
							h.mu.Unlock()
						}
					}
				}
			}
			s.LastEntry(ledgers[0]) // keep the lock busy alongside appends
			continue
		}
		break
	}
	if midFlight {
		// The process dies (no more I/O succeeds), then the power goes.
		// Crashing alone would let the store carry on with handles opened
		// after the crash, as if it had survived it, and never stop.
		fsys := s.fs.(*walfs.CrashFS)
		fsys.SetInject(func(walfs.Op, string) error { return walfs.ErrCrashed })
		fsys.Crash()
		<-done
		return
	}
	// Stop the writers: fence every ledger of this cycle, or let the failed
	// store stop them.
	for _, ledger := range ledgers {
		if st, err := s.Fence(ledger); err == nil {
			h.noteFence(ledger, st.Last)
		}
	}
	<-done
}

func (h *crashHistory) noteFence(ledger uint64, last int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if old, ok := h.fenced[ledger]; !ok || last > old {
		h.fenced[ledger] = last
	}
}

func verifyHistory(t *testing.T, s *Store, h *crashHistory) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	for ledger, attempted := range h.attempted {
		if h.deleted[ledger] {
			expectStatus(t, s, ledger, 0, Unknown)
			continue
		}
		if h.maybeDeleted[ledger] && s.Read(ledger, 0).Status == Unknown {
			continue // a failed delete that took effect
		}
		acked, ok := h.acked[ledger]
		if !ok {
			acked = -1
		}
		limit := acked
		if last, ok := h.maybeClosed[ledger]; ok {
			limit = min(limit, last)
		}
		if last, ok := h.closed[ledger]; ok {
			expectStatus(t, s, ledger, last+1, Absent)
		}
		for e := int64(0); e <= limit; e++ {
			expectPresent(t, s, ledger, e)
		}
		if last, ok := h.fenced[ledger]; ok {
			if err := s.Append(entryFor(ledger, attempted+1)); !errors.Is(err, ErrFenced) {
				t.Fatalf("ledger %d: fence lost: append = %v", ledger, err)
			}
			if cl, closed := h.maybeClosed[ledger]; closed {
				last = min(last, cl)
			}
			for e := int64(0); e <= last; e++ {
				expectPresent(t, s, ledger, e)
			}
		}
		got := s.LastEntry(ledger)
		if got.Last > attempted || got.Last < limit {
			t.Fatalf("ledger %d: last entry %d, acked %d, attempted %d", ledger, got.Last, acked, attempted)
		}
	}
}
