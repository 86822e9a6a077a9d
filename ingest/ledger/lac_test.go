package ledger

import (
	"math/rand/v2"
	"testing"
)

func TestLACAdvancesInEntryOrder(t *testing.T) {
	tr := newLACTracker(2)
	for range 3 {
		tr.add()
	}
	if tr.ack(0, 1) || tr.ack(1, 1) {
		t.Fatal("entry 1 confirmed before entry 0: LAC must not move")
	}
	if tr.lac != -1 {
		t.Fatalf("lac = %d", tr.lac)
	}
	if tr.ack(0, 0) {
		t.Fatal("one ack confirmed entry 0 at A=2")
	}
	if !tr.ack(2, 0) || tr.lac != 1 {
		t.Fatalf("lac = %d after entry 0 confirmed, want 1 (entry 1 was waiting)", tr.lac)
	}
	if tr.ack(0, 2) || tr.ack(0, 2) {
		t.Fatal("the same store acking twice counted twice")
	}
	if tr.ack(0, 7) || tr.ack(1, -1) {
		t.Fatal("ack of an entry never added moved the LAC")
	}
}

func TestLACFrozenIgnoresAcks(t *testing.T) {
	tr := newLACTracker(1)
	tr.add()
	tr.add()
	tr.ack(0, 0)
	if got := tr.freeze(); got != 0 {
		t.Fatalf("freeze = %d", got)
	}
	if tr.ack(0, 1) || tr.lac != 0 {
		t.Fatalf("ack after freeze moved the LAC to %d", tr.lac)
	}
}

// TestLACMatchesDefinition checks random ack orders against the definition:
// LAC is the highest entry such that it and all before have A distinct acks.
func TestLACMatchesDefinition(t *testing.T) {
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 1))
		w := 1 + rng.IntN(5)
		a := 1 + rng.IntN(w)
		tr := newLACTracker(a)
		n := 1 + rng.IntN(30)
		acked := make([]map[int]bool, n)
		for i := range n {
			tr.add()
			acked[i] = map[int]bool{}
		}
		for range 4 * n * w {
			store, entry := rng.IntN(w), int64(rng.IntN(n))
			tr.ack(store, entry)
			acked[entry][store] = true
			want := int64(-1)
			for want+1 < int64(n) && len(acked[want+1]) >= a {
				want++
			}
			if tr.lac != want {
				t.Fatalf("seed %d: lac %d, definition says %d", seed, tr.lac, want)
			}
		}
	}
}
