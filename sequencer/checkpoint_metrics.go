package sequencer

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// checkpointStats is what a node knows of the newest checkpoint: the one
// its takeover started from, then each one it wrote.
type checkpointStats struct {
	mu      sync.Mutex
	pointer CheckpointPointer
	learned time.Time     // when this node took over from it or wrote it
	took    time.Duration // how long writing it took (0: not written here)
	written int           // checkpoints this node wrote
}

func (n *Node) noteCheckpoint(p CheckpointPointer, took time.Duration) {
	n.checkpoints.mu.Lock()
	defer n.checkpoints.mu.Unlock()
	n.checkpoints.pointer, n.checkpoints.learned, n.checkpoints.took = p, time.Now(), took
	if took > 0 {
		n.checkpoints.written++
	}
}

// CheckpointStatus is a leader's view of commit-log checkpoints.
type CheckpointStatus struct {
	// Pointer is the newest checkpoint (zero: none yet).
	Pointer CheckpointPointer
	// Age is how long ago this leader took over from it or wrote it.
	Age time.Duration
	// Took is how long writing it took, Written how many this node wrote.
	Took    time.Duration
	Written int
	// RetainedRecords are the commit records kept for subscribers.
	RetainedRecords int
}

// CheckpointStatus reports the newest checkpoint this node knows, and
// the records it retains while it leads.
func (n *Node) CheckpointStatus() CheckpointStatus {
	n.checkpoints.mu.Lock()
	st := CheckpointStatus{Pointer: n.checkpoints.pointer, Took: n.checkpoints.took, Written: n.checkpoints.written}
	if !n.checkpoints.learned.IsZero() {
		st.Age = time.Since(n.checkpoints.learned)
	}
	n.checkpoints.mu.Unlock()
	if l := n.leader(); l != nil {
		st.RetainedRecords = l.cm.retained()
	}
	return st
}

// checkpointCollector exports CheckpointStatus while the node leads.
type checkpointCollector struct {
	node                                     *Node
	age, end, covered, took, written, retain *prometheus.Desc
	writerCloses                             *prometheus.Desc
}

// WriterCloses counts the ledgers their writers closed while this node
// led: settled ones were closed from the writer's reports alone, the
// others after reading their entries back for the spans.
func (n *Node) WriterCloses() (settled, readBack int64) {
	return n.writerCloses.settled.Load(), n.writerCloses.readBack.Load()
}

// NewCollector returns the node's Prometheus metrics: checkpoint age and
// coverage, and the commit records kept for subscribers (reported while
// it leads).
func NewCollector(n *Node) prometheus.Collector {
	return &checkpointCollector{node: n,
		age:     prometheus.NewDesc("orderlog_sequencer_checkpoint_age_seconds", "Seconds since the leader took over from or wrote the newest commit-log checkpoint.", nil, nil),
		end:     prometheus.NewDesc("orderlog_sequencer_checkpoint_end_offset", "The offset the newest checkpoint's settled map ends at.", nil, nil),
		covered: prometheus.NewDesc("orderlog_sequencer_checkpoint_covered_offsets", "Offsets the newest checkpoint's chunks cover (end minus start).", nil, nil),
		took:    prometheus.NewDesc("orderlog_sequencer_checkpoint_write_seconds", "How long writing the newest checkpoint took.", nil, nil),
		written: prometheus.NewDesc("orderlog_sequencer_checkpoints_written", "Checkpoints this node wrote.", nil, nil),
		retain:  prometheus.NewDesc("orderlog_sequencer_retained_commit_records", "Commit records the leader keeps in memory for commit-map subscribers.", nil, nil),
		writerCloses: prometheus.NewDesc("orderlog_sequencer_writer_closed_ledgers_total",
			"Ledgers their writers closed while this node led, by how the leader settled them: settled (from the writer's reports) or read_back (entries read back for their spans).",
			[]string{"spans"}, nil),
	}
}

func (c *checkpointCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.age, c.end, c.covered, c.took, c.written, c.retain, c.writerCloses} {
		ch <- d
	}
}

func (c *checkpointCollector) Collect(ch chan<- prometheus.Metric) {
	settled, readBack := c.node.WriterCloses()
	ch <- prometheus.MustNewConstMetric(c.writerCloses, prometheus.CounterValue, float64(settled), "settled")
	ch <- prometheus.MustNewConstMetric(c.writerCloses, prometheus.CounterValue, float64(readBack), "read_back")
	if !c.node.Status().Leader {
		return
	}
	st := c.node.CheckpointStatus()
	gauge := func(d *prometheus.Desc, v float64) { ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v) }
	gauge(c.retain, float64(st.RetainedRecords))
	gauge(c.written, float64(st.Written))
	if st.Pointer.IsZero() {
		return
	}
	gauge(c.age, st.Age.Seconds())
	gauge(c.end, float64(st.Pointer.End))
	gauge(c.covered, float64(st.Pointer.End-st.Pointer.Start))
	gauge(c.took, st.Took.Seconds())
}
