package node

import (
	"context"
	"io/fs"
	"path/filepath"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"orderlog/internal/keys"
	"orderlog/proto/orderlogpb"
)

// status is the answer of Admin/Status and GET /v1/status.
func (s *Server) status(ctx context.Context) (*orderlogpb.StatusResponse, error) {
	resp := &orderlogpb.StatusResponse{Version: Version}
	if s.reader != nil {
		epoch, committed := s.reader.Commits().Committed()
		resp.Epoch, resp.Committed = uint64(epoch), committed
		resp.HoleOffsets = s.reader.Commits().HoleOffsets()
	} else if st := s.sequencer.Status(); st.Leader {
		resp.Epoch, resp.Committed = st.Epoch, st.Published
	}
	if got, err := s.cli.Get(ctx, keys.SeqReserved); err == nil && len(got.Kvs) > 0 {
		resp.Reserved, _ = strconv.ParseUint(string(got.Kvs[0].Value), 10, 64)
	}
	if endpoints, err := clientEndpoints(ctx, s.cli); err == nil {
		resp.Endpoints = endpoints
	}
	if s.ingest != nil {
		resp.Producers = uint64(s.ingest.Producers())
		resp.StoreBytes = uint64(dirSize(filepath.Join(s.cfg.DataDir, "wal")))
		addDiskStatus(resp, s.store)
	}
	s.boundedState(ctx).addTo(resp)
	return resp, nil
}

func dirSize(dir string) int64 {
	var total int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if info, err := d.Info(); err == nil {
				total += info.Size()
			}
		}
		return nil
	})
	return total
}

// statusCollector exports the log's position as Prometheus gauges.
type statusCollector struct {
	server    *Server
	committed *prometheus.Desc
	epoch     *prometheus.Desc
	holes     *prometheus.Desc
	lag       *prometheus.Desc
	ready     *prometheus.Desc
}

func newStatusCollector(s *Server) *statusCollector {
	return &statusCollector{
		server:    s,
		committed: prometheus.NewDesc("orderlog_committed_watermark", "The committed watermark C the reader serves below.", nil, nil),
		epoch:     prometheus.NewDesc("orderlog_sequencer_epoch", "The sequencer epoch of the commit map.", nil, nil),
		holes:     prometheus.NewDesc("orderlog_hole_offsets", "Offsets below C that are holes.", nil, nil),
		lag: prometheus.NewDesc("orderlog_committed_lag_offsets",
			"Offsets the sequencer leader has published that the reader has not applied yet.", nil, nil),
		ready: prometheus.NewDesc("orderlog_role_ready",
			"1 when the role is ready (GET /readyz, the gRPC health service), else 0.", []string{"role"}, nil),
	}
}

func (c *statusCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.committed
	ch <- c.epoch
	ch <- c.holes
	ch <- c.lag
	ch <- c.ready
}

func (c *statusCollector) Collect(ch chan<- prometheus.Metric) {
	for _, r := range c.server.roles() {
		ready := 0.0
		if r.err == nil {
			ready = 1
		}
		ch <- prometheus.MustNewConstMetric(c.ready, prometheus.GaugeValue, ready, r.role)
	}
	if c.server.reader == nil { // a sequencer-only process: what it leads
		if st := c.server.sequencer.Status(); st.Leader {
			ch <- prometheus.MustNewConstMetric(c.committed, prometheus.GaugeValue, float64(st.Published))
			ch <- prometheus.MustNewConstMetric(c.epoch, prometheus.GaugeValue, float64(st.Epoch))
		}
		return
	}
	epoch, committed := c.server.reader.Commits().Committed()
	ch <- prometheus.MustNewConstMetric(c.committed, prometheus.GaugeValue, float64(committed))
	ch <- prometheus.MustNewConstMetric(c.epoch, prometheus.GaugeValue, float64(epoch))
	ch <- prometheus.MustNewConstMetric(c.holes, prometheus.GaugeValue, float64(c.server.reader.Commits().HoleOffsets()))
	if c.server.sequencer == nil {
		return
	}
	if st := c.server.sequencer.Status(); st.Leader && st.Published >= committed {
		ch <- prometheus.MustNewConstMetric(c.lag, prometheus.GaugeValue, float64(st.Published-committed))
	}
}
