package ingest

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"orderlog/proto/orderlogpb"
)

// nodeMetrics are the ingest node's Prometheus metrics.
type nodeMetrics struct {
	loggedMessages   prometheus.Counter
	appendedBytes    prometheus.Counter
	batchMessages    prometheus.Histogram
	ackLatency       prometheus.Histogram
	refusedFrames    *prometheus.CounterVec
	ledgersOpened    prometheus.Counter
	ledgerRolls      *prometheus.CounterVec
	stateAdvances    prometheus.Counter
	producersExpired prometheus.Counter
	ledgerErrors     prometheus.Counter
	grantRefusals    prometheus.Counter
	grants           prometheus.Counter
	grantLatency     prometheus.Histogram
	appendWait       prometheus.Histogram
	confirmLatency   prometheus.Histogram
	frameStages      *prometheus.HistogramVec
	schemaWarnings   prometheus.Counter
	// The four stages' histograms, looked up once rather than per frame.
	intake, batch, confirm, answer prometheus.Observer
}

// latencyBuckets run from 100 µs to 3.3 s.
var latencyBuckets = prometheus.ExponentialBuckets(0.0001, 2, 16)

func newNodeMetrics() *nodeMetrics {
	m := &nodeMetrics{
		loggedMessages: prometheus.NewCounter(prometheus.CounterOpts{Name: "orderlog_ingest_logged_messages_total", Help: "Messages logged (acknowledged durable)."}),
		appendedBytes:  prometheus.NewCounter(prometheus.CounterOpts{Name: "orderlog_ingest_appended_bytes_total", Help: "Entry payload bytes appended to ledgers."}),
		batchMessages: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "orderlog_ingest_batch_messages", Help: "Messages per ledger entry.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 8)}),
		ackLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "orderlog_ingest_ack_latency_seconds", Help: "Produce frame arrival to answer.",
			Buckets: latencyBuckets}),
		refusedFrames: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "orderlog_ingest_refused_frames_total", Help: "Produce frames refused, by error code."}, []string{"code"}),
		ledgersOpened: prometheus.NewCounter(prometheus.CounterOpts{Name: "orderlog_ingest_ledgers_opened_total", Help: "Ledgers this node opened."}),
		ledgerRolls: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "orderlog_ingest_ledger_rolls_total",
			Help: "Open ledgers replaced by a roll (by size or age) rather than a failure."}, []string{"reason"}),
		stateAdvances: prometheus.NewCounter(prometheus.CounterOpts{Name: "orderlog_ingest_producer_state_advances_total",
			Help: "Producer records whose state ledger a roll moved forward."}),
		producersExpired: prometheus.NewCounter(prometheus.CounterOpts{Name: "orderlog_ingest_producers_expired_total",
			Help: "Producers dropped after being idle past --producer-expiry."}),
		ledgerErrors:  prometheus.NewCounter(prometheus.CounterOpts{Name: "orderlog_ingest_ledger_errors_total", Help: "Failed ledger creations."}),
		grantRefusals: prometheus.NewCounter(prometheus.CounterOpts{Name: "orderlog_ingest_grant_refusals_total", Help: "Grants the sequencer refused."}),
		grants:        prometheus.NewCounter(prometheus.CounterOpts{Name: "orderlog_ingest_grants_total", Help: "Grants received from the sequencer (one per batch)."}),
		grantLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "orderlog_ingest_grant_latency_seconds", Help: "Grant request to reply.",
			Buckets: latencyBuckets}),
		appendWait: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "orderlog_ingest_append_wait_seconds",
			Help: "Arrival of an entry's oldest message to the entry's append (batching and grant).", Buckets: latencyBuckets}),
		confirmLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "orderlog_ingest_confirm_latency_seconds",
			Help: "Entry append to its confirmation at the ack quorum (replication and fsync).", Buckets: latencyBuckets}),
		frameStages: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "orderlog_ingest_frame_stage_seconds",
			Help: "Where each logged produce frame's ack latency went, one observation per frame and stage: " +
				"intake (arrival to the node loop), batch (to the append of the entry holding its last message, grant included), " +
				"confirm (to that entry's confirmation at the ack quorum), answer (to the answer handed to the stream).",
			Buckets: latencyBuckets}, []string{"stage"}),
		schemaWarnings: prometheus.NewCounter(prometheus.CounterOpts{Name: "orderlog_ingest_schema_warnings_total",
			Help: "Messages logged although they do not match their topic's schema (validation warn); strict refusals count in orderlog_ingest_refused_frames_total{code=\"SCHEMA_MISMATCH\"}."}),
	}
	for _, stage := range []struct {
		name     string
		observer *prometheus.Observer
	}{{"intake", &m.intake}, {"batch", &m.batch}, {"confirm", &m.confirm}, {"answer", &m.answer}} {
		*stage.observer = m.frameStages.WithLabelValues(stage.name)
	}
	return m
}

func (m *nodeMetrics) observeFrame(resp *orderlogpb.ProduceResponse, f *frame) {
	if resp.ErrorCode != "" {
		m.refusedFrames.WithLabelValues(resp.ErrorCode).Inc()
		return
	}
	now := time.Now()
	m.ackLatency.Observe(now.Sub(f.arrived).Seconds())
	// Per frame, not per entry: a slow moment makes few big entries, so
	// per-entry histograms under-count it.
	t := f.times
	if t.queued.IsZero() || t.appended.IsZero() || t.confirmed.IsZero() {
		return // refused early, answered from the dedup window, or acknowledged early (ack mode leader)
	}
	m.intake.Observe(t.queued.Sub(f.arrived).Seconds())
	m.batch.Observe(t.appended.Sub(t.queued).Seconds())
	m.confirm.Observe(t.confirmed.Sub(t.appended).Seconds())
	m.answer.Observe(now.Sub(t.confirmed).Seconds())
}

// Collectors returns the metrics to register.
func (n *Node) Collectors() []prometheus.Collector {
	m := n.metrics
	return []prometheus.Collector{m.loggedMessages, m.appendedBytes, m.batchMessages, m.ackLatency,
		m.refusedFrames, m.ledgersOpened, m.ledgerRolls, m.stateAdvances, m.producersExpired, m.ledgerErrors, m.grantRefusals, m.grants, m.grantLatency,
		m.appendWait, m.confirmLatency, m.frameStages, m.schemaWarnings}
}
