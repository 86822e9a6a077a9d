package ledger

import (
	"bytes"
	"sync"
	"testing"
	"time"

	"orderlog/proto/walpb"
)

// ReleasePayload hands back a payload only once every ensemble member acked
// its entry; scribbling over a released buffer (as a reuse would) changes
// nothing the stores hold.
func TestPayloadsAreReleasedOnlyOnceEveryStoreAckedThem(t *testing.T) {
	c := newTestCluster(t, 3, 11)
	var mu sync.Mutex
	released := map[string]bool{} // payload contents handed back
	w := c.create(t, 2, 1, WriterOptions{
		ReleasePayload: func(p []byte) {
			mu.Lock()
			released[string(p)] = true
			mu.Unlock()
			for i := range p {
				p[i] = 'X'
			}
		},
		UnreachableAfter: time.Minute, // the cut store stays in the ledger
	})
	appendRange := func(from, to int64) {
		for i := from; i < to; i++ {
			if _, err := w.Append(payloadFor(w.ID(), i), spanFor(i)); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.WaitConfirmed(t.Context(), to-1); err != nil {
			t.Fatal(err)
		}
	}
	waitReleased := func(want int) {
		deadline := time.Now().Add(20 * time.Second)
		for {
			mu.Lock()
			got := len(released)
			mu.Unlock()
			if got == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d payloads released, want %d", got, want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	appendRange(0, 10)
	waitReleased(10)

	// Entries 10..19 are confirmed by the other two stores but never reach
	// slot 2: their payloads must stay with the writer.
	c.net.partition("writer", c.slots[2].name, true)
	appendRange(10, 20)
	time.Sleep(100 * time.Millisecond)
	mu.Lock()
	for i := int64(10); i < 20; i++ {
		if released[string(payloadFor(w.ID(), i))] {
			t.Errorf("entry %d released before slot 2 acked it", i)
		}
	}
	mu.Unlock()

	// Healed, the link resends them from the retained payloads.
	c.net.partition("writer", c.slots[2].name, false)
	waitReleased(20)
	mu.Lock()
	for i := int64(0); i < 20; i++ {
		if !released[string(payloadFor(w.ID(), i))] {
			t.Errorf("entry %d: payload released with other contents", i)
		}
	}
	mu.Unlock()
	m, err := w.Close(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	// Every store's copy is intact despite the scribbling.
	for i, sl := range c.slots {
		cl, ok := sl.client()
		if !ok {
			t.Fatalf("slot %s is down", sl.name)
		}
		for id := int64(0); id <= m.LastEntry; id++ {
			resp, err := cl.ReadEntry(t.Context(), &walpb.ReadEntryRequest{LedgerId: m.ID, StoreIncarnation: m.Ensemble[i].Incarnation, EntryId: id})
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(resp.Payload, payloadFor(m.ID, id)) {
				t.Fatalf("slot %s entry %d: %q", sl.name, id, resp.Payload)
			}
		}
	}
}

// A store dropped for lagging never acked the entries retained for it: they
// leave the writer without being handed back, since its link may still be
// sending them.
func TestPayloadsOfADroppedStoreAreNotReleased(t *testing.T) {
	c := newTestCluster(t, 3, 12)
	var mu sync.Mutex
	released := map[string]bool{}
	w := c.create(t, 2, 1, WriterOptions{
		MaxInFlight: 4, MaxRetained: 4, UnreachableAfter: time.Minute,
		ReleasePayload: func(p []byte) { mu.Lock(); released[string(p)] = true; mu.Unlock() },
	})
	defer w.Close(t.Context())
	c.net.partition("writer", c.slots[2].name, true)
	const n = 30
	for i := range int64(n) {
		if _, err := w.Append(payloadFor(w.ID(), i), spanFor(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.WaitConfirmed(t.Context(), n-1); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(released) != 0 {
		t.Fatalf("%d payloads released that slot 2 never acked", len(released))
	}
}
