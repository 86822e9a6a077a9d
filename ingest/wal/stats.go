package wal

import "sync/atomic"

// Stats are cumulative counters since Open.
type Stats struct {
	// Batches is the number of group-commit batches written.
	Batches int64
	// Syncs is the number of fdatasync calls on segment data.
	Syncs int64
	// Bytes is the number of journal bytes written.
	Bytes int64
}

type statCounters struct {
	batches, syncs, bytes atomic.Int64
}

// Stats returns the store's counters.
func (s *Store) Stats() Stats {
	return Stats{Batches: s.stats.batches.Load(), Syncs: s.stats.syncs.Load(), Bytes: s.stats.bytes.Load()}
}
