package node

import (
	"github.com/prometheus/client_golang/prometheus"

	"orderlog/ingest/wal"
)

// storeCollector exports the WAL store's commit-loop counters: what group
// commit costs on this disk (fdatasync latency, syncs, bytes).
type storeCollector struct {
	store                   *wal.Store
	syncs, delayed, batches *prometheus.Desc
	bytes, write            *prometheus.Desc
	syncLatency             *prometheus.Desc
}

func newStoreCollector(store *wal.Store) *storeCollector {
	return &storeCollector{
		store: store,
		syncs: prometheus.NewDesc("orderlog_wal_syncs_total", "fdatasync calls on WAL segment data.", nil, nil),
		delayed: prometheus.NewDesc("orderlog_wal_delayed_syncs_total",
			"Batches the commit delay (--fsync delay=) held back before writing them.", nil, nil),
		batches: prometheus.NewDesc("orderlog_wal_batches_total", "Group-commit batches the WAL store wrote.", nil, nil),
		bytes:   prometheus.NewDesc("orderlog_wal_written_bytes_total", "Journal bytes the WAL store wrote.", nil, nil),
		write:   prometheus.NewDesc("orderlog_wal_write_seconds_total", "Time the commit loop spent in write calls.", nil, nil),
		syncLatency: prometheus.NewDesc("orderlog_wal_fsync_latency_seconds",
			"Duration of each fdatasync of WAL segment data.", nil, nil),
	}
}

func (c *storeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.syncs, c.delayed, c.batches, c.bytes, c.write, c.syncLatency} {
		ch <- d
	}
}

func (c *storeCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.store.Stats()
	ch <- prometheus.MustNewConstMetric(c.syncs, prometheus.CounterValue, float64(st.Syncs))
	ch <- prometheus.MustNewConstMetric(c.delayed, prometheus.CounterValue, float64(st.DelayedSyncs))
	ch <- prometheus.MustNewConstMetric(c.batches, prometheus.CounterValue, float64(st.Batches))
	ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.CounterValue, float64(st.Bytes))
	ch <- prometheus.MustNewConstMetric(c.write, prometheus.CounterValue, st.WriteTime.Seconds())
	buckets := make(map[float64]uint64, len(wal.SyncLatencyBounds))
	var cumulative uint64
	for i, bound := range wal.SyncLatencyBounds {
		cumulative += uint64(st.SyncLatency[i])
		buckets[bound.Seconds()] = cumulative
	}
	cumulative += uint64(st.SyncLatency[len(wal.SyncLatencyBounds)])
	ch <- prometheus.MustNewConstHistogram(c.syncLatency, cumulative, st.SyncTime.Seconds(), buckets)
}
