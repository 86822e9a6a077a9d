package wal

import (
	"sync/atomic"
	"time"
)

// SyncLatencyBounds are the upper bounds of the fdatasync latency buckets
// in Stats.SyncLatency: 50 µs doubling to about 1.6 s.
var SyncLatencyBounds = func() [16]time.Duration {
	var b [16]time.Duration
	for i := range b {
		b[i] = 50 * time.Microsecond << i
	}
	return b
}()

// Stats are cumulative counters since Open.
type Stats struct {
	// Batches is the number of group-commit batches written.
	Batches int64
	// Syncs is the number of fdatasync calls on segment data.
	Syncs int64
	// DelayedSyncs is the number of batches the commit delay (SyncDelay)
	// held back before writing them.
	DelayedSyncs int64
	// Bytes is the number of journal bytes written.
	Bytes int64
	// WriteTime and SyncTime are the time the commit loop spent in write
	// and fdatasync calls on segment data.
	WriteTime, SyncTime time.Duration
	// SyncLatency counts fdatasync calls by duration: SyncLatency[i] those
	// within SyncLatencyBounds[i] (and above the bound before it), the last
	// element those beyond every bound.
	SyncLatency [len(SyncLatencyBounds) + 1]int64
}

type statCounters struct {
	batches, syncs, delayed, bytes, writeNanos, syncNanos atomic.Int64
	syncLatency                                           [len(SyncLatencyBounds) + 1]atomic.Int64
}

// observeSync counts one fdatasync of duration d.
func (c *statCounters) observeSync(d time.Duration) {
	c.syncs.Add(1)
	c.syncNanos.Add(int64(d))
	i := 0
	for i < len(SyncLatencyBounds) && d > SyncLatencyBounds[i] {
		i++
	}
	c.syncLatency[i].Add(1)
}

// Stats returns the store's counters.
func (s *Store) Stats() Stats {
	st := Stats{Batches: s.stats.batches.Load(), Syncs: s.stats.syncs.Load(), DelayedSyncs: s.stats.delayed.Load(), Bytes: s.stats.bytes.Load(),
		WriteTime: time.Duration(s.stats.writeNanos.Load()), SyncTime: time.Duration(s.stats.syncNanos.Load())}
	for i := range st.SyncLatency {
		st.SyncLatency[i] = s.stats.syncLatency[i].Load()
	}
	return st
}
