package node

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"orderlog/internal/keys"
	"orderlog/proto/orderlogpb"
	"orderlog/reader"
)

// boundedState is what Status and /metrics say of the log's bounds: the
// log start, the ledgers, the oldest retained message's age, the commit
// map's memory.
type boundedState struct {
	logStart, ledgers, storeLedgers, commitMapSegments uint64
	oldestAge                                          time.Duration // 0: no message at the start yet
}

// oldestCache keeps the oldest retained message's ingest time for a few
// seconds: finding it is a read, and every scrape and status call asks.
type oldestCache struct {
	mu    sync.Mutex
	start uint64
	micro int64 // ingest time of the message at start, µs (0: none)
	read  time.Time
}

const oldestCacheFor = 5 * time.Second

func (s *Server) boundedState(ctx context.Context) boundedState {
	st := boundedState{logStart: s.logStart.Load()}
	if got, err := s.cli.Get(ctx, keys.LedgersPrefix, clientv3.WithPrefix(), clientv3.WithCountOnly()); err == nil {
		st.ledgers = uint64(got.Count)
	}
	if s.store != nil {
		st.storeLedgers = uint64(len(s.store.Ledgers()))
	}
	if s.reader != nil {
		window, cached := s.reader.Commits().Resident()
		st.commitMapSegments = uint64(window + cached)
		if micro := s.oldestIngestTime(ctx, st.logStart); micro > 0 {
			st.oldestAge = max(0, time.Since(time.UnixMicro(micro)))
		}
	}
	return st
}

// oldestIngestTime is the ingest time of the first message at or above
// the log start (0 if there is none, or it cannot be read now).
func (s *Server) oldestIngestTime(ctx context.Context, start uint64) int64 {
	c := &s.oldest
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.start == start && c.micro != 0 && time.Since(c.read) < oldestCacheFor {
		return c.micro
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	page, err := s.reader.ReadPage(ctx, start, 1, reader.Filter{})
	if err != nil || len(page.Messages) == 0 {
		return 0
	}
	c.start, c.micro, c.read = start, page.Messages[0].IngestTimeUs, time.Now()
	return c.micro
}

func (st boundedState) addTo(resp *orderlogpb.StatusResponse) {
	resp.LogStart, resp.Ledgers, resp.StoreLedgers = st.logStart, st.ledgers, st.storeLedgers
	resp.OldestMessageAgeMs, resp.CommitMapSegments = uint64(st.oldestAge.Milliseconds()), st.commitMapSegments
}

// boundedCollector exports boundedState as Prometheus gauges.
type boundedCollector struct {
	server                                          *Server
	logStart, ledgers, storeLedgers, oldest, window *prometheus.Desc
	producers                                       *prometheus.Desc
}

func newBoundedCollector(s *Server) *boundedCollector {
	return &boundedCollector{server: s,
		logStart:     prometheus.NewDesc("orderlog_log_start", "The log start: offsets below it were deleted by retention.", nil, nil),
		ledgers:      prometheus.NewDesc("orderlog_ledgers", "Ledger records in etcd (every node's, open and closed).", nil, nil),
		storeLedgers: prometheus.NewDesc("orderlog_store_ledgers", "Ledgers this node's WAL store holds.", nil, nil),
		oldest:       prometheus.NewDesc("orderlog_oldest_message_age_seconds", "Age of the message at the log start (by its ingest time).", nil, nil),
		window:       prometheus.NewDesc("orderlog_commit_map_resident_segments", "Commit-map segments this node's reader keeps in memory.", nil, nil),
		producers:    prometheus.NewDesc("orderlog_producers", "Producers this node's ingest tracks (owned, with a state).", nil, nil),
	}
}

func (c *boundedCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.logStart, c.ledgers, c.storeLedgers, c.oldest, c.window, c.producers} {
		ch <- d
	}
}

func (c *boundedCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	st := c.server.boundedState(ctx)
	ch <- prometheus.MustNewConstMetric(c.logStart, prometheus.GaugeValue, float64(st.logStart))
	ch <- prometheus.MustNewConstMetric(c.ledgers, prometheus.GaugeValue, float64(st.ledgers))
	if c.server.store != nil {
		ch <- prometheus.MustNewConstMetric(c.storeLedgers, prometheus.GaugeValue, float64(st.storeLedgers))
	}
	if c.server.reader != nil {
		ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, st.oldestAge.Seconds())
		ch <- prometheus.MustNewConstMetric(c.window, prometheus.GaugeValue, float64(st.commitMapSegments))
	}
	if c.server.ingest != nil {
		ch <- prometheus.MustNewConstMetric(c.producers, prometheus.GaugeValue, float64(c.server.ingest.Producers()))
	}
}
