package consumer

import (
	"context"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

var (
	committedDesc = prometheus.NewDesc("orderlog_consumer_group_committed_offset",
		"A consumer group's committed offset in a virtual partition (the next offset it consumes).",
		[]string{"group", "topic", "partition"}, nil)
	lagDesc = prometheus.NewDesc("orderlog_consumer_group_lag_offsets",
		"C minus a consumer group's committed offset in a virtual partition: an upper bound of its unread messages.",
		[]string{"group", "topic", "partition"}, nil)
	membersDesc = prometheus.NewDesc("orderlog_consumer_group_members",
		"A consumer group's members in its current generation.", []string{"group"}, nil)
	generationDesc = prometheus.NewDesc("orderlog_consumer_group_generation",
		"A consumer group's generation: it grows by one at every rebalance.", []string{"group"}, nil)
)

// Collector reports every group's offsets and lag, read from etcd at each
// scrape (every node reports the same figures).
func (s *Service) Collector() prometheus.Collector { return collector{s} }

type collector struct{ s *Service }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- committedDesc
	ch <- lagDesc
	ch <- membersDesc
	ch <- generationDesc
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	groups, err := c.s.store.groups(ctx)
	if err != nil {
		return
	}
	_, end := c.s.reader.Commits().Committed()
	for _, g := range groups {
		snap, err := c.s.store.load(ctx, g)
		if err != nil {
			return
		}
		offsets, err := c.s.store.offsets(ctx, g)
		if err != nil {
			return
		}
		d := describe(g, snap.state, offsets, end, c.s.reader.ReadStart())
		ch <- prometheus.MustNewConstMetric(membersDesc, prometheus.GaugeValue, float64(len(d.Members)), g)
		ch <- prometheus.MustNewConstMetric(generationDesc, prometheus.GaugeValue, float64(d.Generation), g)
		for _, p := range d.Partitions {
			part := strconv.FormatUint(uint64(p.Partition), 10)
			if p.Committed != nil {
				ch <- prometheus.MustNewConstMetric(committedDesc, prometheus.GaugeValue, float64(*p.Committed), g, p.Topic, part)
			}
			ch <- prometheus.MustNewConstMetric(lagDesc, prometheus.GaugeValue, float64(p.Lag), g, p.Topic, part)
		}
	}
}
