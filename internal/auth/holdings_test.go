package auth

import (
	"sync"
	"testing"
)

// TestHoldingsBoundEachKeyAlone: a key at its limit is refused until it
// releases one, other keys are not, and released keys leave nothing
// behind (the map does not grow with every address ever seen).
func TestHoldingsBoundEachKeyAlone(t *testing.T) {
	var h Holdings
	for i := range 3 {
		if !h.Acquire("a", 3) {
			t.Fatalf("acquire %d of 3 refused", i+1)
		}
	}
	if h.Acquire("a", 3) {
		t.Fatal("a fourth acquire past a limit of 3 was granted")
	}
	if !h.Acquire("b", 3) || h.Held("b") != 1 {
		t.Fatal("another key was refused with the first at its limit")
	}
	h.Release("a")
	if !h.Acquire("a", 3) {
		t.Fatal("a key below its limit again was refused")
	}
	if !h.Acquire("c", 0) || !h.Acquire("c", -1) {
		t.Fatal("a limit of 0 or less refused")
	}
	for _, k := range []string{"a", "a", "a", "b", "c", "c"} {
		h.Release(k)
	}
	if len(h.held) != 0 {
		t.Fatalf("released keys left %v", h.held)
	}
}

// TestHoldingsAreExactUnderConcurrency: of many concurrent acquires for one
// key, exactly the limit succeed.
func TestHoldingsAreExactUnderConcurrency(t *testing.T) {
	var h Holdings
	var wg sync.WaitGroup
	var mu sync.Mutex
	granted := 0
	for range 200 {
		wg.Go(func() {
			if h.Acquire("k", 50) {
				mu.Lock()
				granted++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if granted != 50 || h.Held("k") != 50 {
		t.Fatalf("granted %d, held %d, want 50", granted, h.Held("k"))
	}
}
