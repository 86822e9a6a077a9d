package tiering

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the tiering worker's Prometheus metrics. A nil *Metrics
// observes nothing.
type Metrics struct {
	archived  prometheus.Gauge
	files     prometheus.Counter
	bytes     prometheus.Counter
	conflicts prometheus.Gauge
	inClear   prometheus.Counter
}

// NewMetrics returns the metrics, registered with reg if it is not nil.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		archived: prometheus.NewGauge(prometheus.GaugeOpts{Name: "orderlog_tiering_archived_watermark",
			Help: "The archived watermark T as this node's tiering worker last set or read it: offsets below it are in the archive."}),
		files: prometheus.NewCounter(prometheus.CounterOpts{Name: "orderlog_tiering_files_total",
			Help: "Archive files this node's tiering worker published."}),
		bytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "orderlog_tiering_bytes_total",
			Help: "Bytes of the archive files this node's tiering worker published."}),
		conflicts: prometheus.NewGauge(prometheus.GaugeOpts{Name: "orderlog_tiering_conflict",
			Help: "1 while the tiering worker is halted: an object under a planned key holds other content (alert on it)."}),
		inClear: prometheus.NewCounter(prometheus.CounterOpts{Name: "orderlog_tiering_adopted_in_clear_total",
			Help: "Archive objects in clear that this node's tiering worker, encrypting, found under a planned key and adopted."}),
	}
	if reg != nil {
		reg.MustRegister(m.Collectors()...)
	}
	return m
}

// Collectors are the metrics to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.archived, m.files, m.bytes, m.conflicts, m.inClear}
}

func (m *Metrics) observeHead(h Head) {
	if m != nil {
		m.archived.Set(float64(h.T))
	}
}

func (m *Metrics) observePublished(e ManifestEntry) {
	if m != nil {
		m.files.Inc()
		m.bytes.Add(float64(e.Bytes))
	}
}

func (m *Metrics) observeConflict() {
	if m != nil {
		m.conflicts.Set(1)
	}
}

func (m *Metrics) observeAdoptedInClear() {
	if m != nil {
		m.inClear.Inc()
	}
}
