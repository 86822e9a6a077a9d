package ledger

import (
	"sync"
	"testing"
	"time"
)

// OnLocalDurable reports what the writer's own store fsynced even while the
// ack quorum is out of reach, and OnConfirm still waits for the quorum.
func TestLocalDurableIsReportedBeforeTheQuorum(t *testing.T) {
	c := newTestCluster(t, 3, 7)
	local := c.slots[0].member().StoreID
	const n = 20
	var mu sync.Mutex
	var localReports, confirms []int64
	allLocal := make(chan struct{})
	w := c.create(t, 2, 1, WriterOptions{
		LocalStore: local,
		OnLocalDurable: func(e int64) {
			mu.Lock()
			localReports = append(localReports, e)
			mu.Unlock()
			if e == n-1 {
				close(allLocal)
			}
		},
		OnConfirm: func(lac int64) { mu.Lock(); confirms = append(confirms, lac); mu.Unlock() },
		// Long enough that the cut stores do not fail the writer meanwhile.
		UnreachableAfter: time.Minute,
	})
	defer w.Close(t.Context())
	c.net.partition("writer", c.slots[1].name, true)
	c.net.partition("writer", c.slots[2].name, true)
	for i := range int64(n) {
		if _, err := w.Append(payloadFor(w.ID(), i), spanFor(i)); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-allLocal:
	case <-time.After(20 * time.Second):
		t.Fatal("the local store's acks were not reported")
	}
	mu.Lock()
	if len(confirms) != 0 || w.LAC() != -1 {
		t.Fatalf("confirmed %v (LAC %d) with one store of A=2 reachable", confirms, w.LAC())
	}
	for i := 1; i < len(localReports); i++ {
		if localReports[i] <= localReports[i-1] {
			t.Fatalf("OnLocalDurable went %d then %d", localReports[i-1], localReports[i])
		}
	}
	mu.Unlock()
	c.net.partition("writer", c.slots[1].name, false)
	if err := w.WaitConfirmed(t.Context(), n-1); err != nil {
		t.Fatal(err)
	}
}
