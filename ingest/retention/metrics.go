package retention

import (
	"github.com/prometheus/client_golang/prometheus"

	"orderlog/ingest/ledger"
)

// Metrics are the retention worker's Prometheus metrics. A nil *Metrics
// observes nothing.
type Metrics struct {
	logStart       prometheus.Gauge
	deletedLedgers prometheus.Counter
	deletedBytes   prometheus.Counter
}

// NewMetrics returns the metrics, registered with reg if it is not nil.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		logStart: prometheus.NewGauge(prometheus.GaugeOpts{Name: "orderlog_retention_log_start",
			Help: "The log start offset as this node's retention worker last set or read it (only the elected worker's moves)."}),
		deletedLedgers: prometheus.NewCounter(prometheus.CounterOpts{Name: "orderlog_retention_deleted_ledgers_total",
			Help: "Ledgers retention deleted (every copy and the record)."}),
		deletedBytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "orderlog_retention_deleted_bytes_total",
			Help: "Entry bytes of the ledgers retention deleted, one copy each (0 for those closed by a recovery)."}),
	}
	if reg != nil {
		reg.MustRegister(m.logStart, m.deletedLedgers, m.deletedBytes)
	}
	return m
}

// Collectors are the metrics to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.logStart, m.deletedLedgers, m.deletedBytes}
}

func (m *Metrics) observeStart(start uint64) {
	if m != nil {
		m.logStart.Set(float64(start))
	}
}

func (m *Metrics) observeDeleted(l ledger.Metadata) {
	if m != nil {
		m.deletedLedgers.Inc()
		m.deletedBytes.Add(float64(l.Bytes))
	}
}
