package node

import (
	"github.com/prometheus/client_golang/prometheus"

	"orderlog/ingest/wal"
	"orderlog/internal/apierr"
	"orderlog/proto/orderlogpb"
)

// diskAdmission refuses produce frames while the node's WAL disk is full
// (wal.DiskState.Full: from the high-water mark until below the low-water
// mark), before the ingest node accepts them: a refused frame holds
// nothing logged, and frames accepted before are logged and acknowledged
// as usual. The node stays ready (GET /readyz): it still serves reads,
// and a load balancer that took it out would stop those too; clients move
// their producers after a few retryable refusals.
type diskAdmission struct {
	store *wal.Store
	// refused counts the messages of refused frames by reason.
	refused *prometheus.CounterVec
}

func newDiskAdmission(store *wal.Store) *diskAdmission {
	return &diskAdmission{store: store, refused: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "orderlog_ingest_refused_messages_total",
		Help: "Messages refused before they were accepted, by reason (disk_full: the WAL disk is above its high-water mark).",
	}, []string{"reason"})}
}

// admit is ingest.Config.Admit.
func (d *diskAdmission) admit(messages int) error {
	if !d.store.DiskFull() {
		return nil
	}
	st := d.store.Disk()
	d.refused.WithLabelValues("disk_full").Add(float64(messages))
	return apierr.New(apierr.DiskFull, "this node's WAL disk is %.1f%% used (high-water mark %.1f%%; writes resume below %.1f%%): nothing was logged, retry later or on another node",
		100*st.Fraction, 100*st.Limits.HighWater, 100*st.Limits.LowWater)
}

// addDiskStatus fills the status answer's journal and disk fields.
func addDiskStatus(resp *orderlogpb.StatusResponse, store *wal.Store) {
	st := store.Disk()
	resp.JournalBytes = uint64(store.JournalBytes())
	resp.DiskUsedBytes, resp.DiskTotalBytes = st.Usage.Used, st.Usage.Total
	resp.DiskUsedFraction, resp.DiskFull = st.Fraction, st.Full
}

// diskCollector exports the WAL store's disk and journal as gauges.
type diskCollector struct {
	store                       *wal.Store
	used, avail, total, journal *prometheus.Desc
	fraction, full              *prometheus.Desc
}

func newDiskCollector(store *wal.Store) *diskCollector {
	return &diskCollector{
		store:    store,
		used:     prometheus.NewDesc("orderlog_wal_disk_used_bytes", "Used bytes of the file system holding the WAL (statfs, last sample).", nil, nil),
		avail:    prometheus.NewDesc("orderlog_wal_disk_avail_bytes", "Bytes of the WAL's file system that writers may still use.", nil, nil),
		total:    prometheus.NewDesc("orderlog_wal_disk_total_bytes", "Size of the file system holding the WAL.", nil, nil),
		fraction: prometheus.NewDesc("orderlog_wal_disk_used_ratio", "Used share of the WAL's file system, as df's Use% (0 to 1).", nil, nil),
		full: prometheus.NewDesc("orderlog_wal_disk_full",
			"1 while the WAL's disk is full (from --disk-high-water until below the low-water mark): new messages are refused with DISK_FULL.", nil, nil),
		journal: prometheus.NewDesc("orderlog_wal_journal_bytes", "Length of the WAL journal's segment files.", nil, nil),
	}
}

func (c *diskCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.used, c.avail, c.total, c.fraction, c.full, c.journal} {
		ch <- d
	}
}

func (c *diskCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.store.Disk()
	full := 0.0
	if st.Full {
		full = 1
	}
	ch <- prometheus.MustNewConstMetric(c.used, prometheus.GaugeValue, float64(st.Usage.Used))
	ch <- prometheus.MustNewConstMetric(c.avail, prometheus.GaugeValue, float64(st.Usage.Avail))
	ch <- prometheus.MustNewConstMetric(c.total, prometheus.GaugeValue, float64(st.Usage.Total))
	ch <- prometheus.MustNewConstMetric(c.fraction, prometheus.GaugeValue, st.Fraction)
	ch <- prometheus.MustNewConstMetric(c.full, prometheus.GaugeValue, full)
	ch <- prometheus.MustNewConstMetric(c.journal, prometheus.GaugeValue, float64(c.store.JournalBytes()))
}
