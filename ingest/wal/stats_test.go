package wal

import (
	"testing"
	"time"
)

func TestObserveSyncBuckets(t *testing.T) {
	var c statCounters
	for _, d := range []time.Duration{10 * time.Microsecond, 50 * time.Microsecond, 51 * time.Microsecond, 3 * time.Millisecond, time.Hour} {
		c.observeSync(d)
	}
	want := map[int]int64{0: 2, 1: 1, 6: 1, len(SyncLatencyBounds): 1} // 3 ms is within 50 µs << 6 = 3.2 ms
	for i := range c.syncLatency {
		if got := c.syncLatency[i].Load(); got != want[i] {
			t.Errorf("bucket %d (≤ %v): %d syncs, want %d", i, boundOf(i), got, want[i])
		}
	}
	if c.syncs.Load() != 5 {
		t.Errorf("syncs = %d, want 5", c.syncs.Load())
	}
}

func boundOf(i int) any {
	if i < len(SyncLatencyBounds) {
		return SyncLatencyBounds[i]
	}
	return "+Inf"
}
