package wal

import (
	"sync/atomic"
	"time"
)

// Stats are cumulative counters since Open.
type Stats struct {
	// Batches is the number of group-commit batches written.
	Batches int64
	// Syncs is the number of fdatasync calls on segment data.
	Syncs int64
	// Bytes is the number of journal bytes written.
	Bytes int64
	// WriteTime and SyncTime are the time the commit loop spent in write
	// and fdatasync calls on segment data.
	WriteTime, SyncTime time.Duration
}

type statCounters struct {
	batches, syncs, bytes, writeNanos, syncNanos atomic.Int64
}

// Stats returns the store's counters.
func (s *Store) Stats() Stats {
	return Stats{Batches: s.stats.batches.Load(), Syncs: s.stats.syncs.Load(), Bytes: s.stats.bytes.Load(),
		WriteTime: time.Duration(s.stats.writeNanos.Load()), SyncTime: time.Duration(s.stats.syncNanos.Load())}
}
