package reader

import "github.com/prometheus/client_golang/prometheus"

// commitMapCollector exports what a CommitMap holds in memory.
type commitMapCollector struct {
	commits               *CommitMap
	window, cached, start *prometheus.Desc
}

// NewCollector returns Prometheus metrics of the commit map's memory: the
// segments in its window and in the cache of checkpoint chunks, and the
// end of the checkpoint it reads older segments from.
func NewCollector(commits *CommitMap) prometheus.Collector {
	return &commitMapCollector{commits: commits,
		window: prometheus.NewDesc("orderlog_reader_commit_map_window_segments", "Commit-map segments the reader holds in memory above its checkpoint.", nil, nil),
		cached: prometheus.NewDesc("orderlog_reader_commit_map_cached_segments", "Commit-map segments held in the cache of decoded checkpoint chunks.", nil, nil),
		start:  prometheus.NewDesc("orderlog_reader_checkpoint_end_offset", "End of the checkpoint the reader loaded (0: none); segments below it are read from its chunks.", nil, nil),
	}
}

func (c *commitMapCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.window
	ch <- c.cached
	ch <- c.start
}

func (c *commitMapCollector) Collect(ch chan<- prometheus.Metric) {
	window, cached := c.commits.Resident()
	ch <- prometheus.MustNewConstMetric(c.window, prometheus.GaugeValue, float64(window))
	ch <- prometheus.MustNewConstMetric(c.cached, prometheus.GaugeValue, float64(cached))
	ch <- prometheus.MustNewConstMetric(c.start, prometheus.GaugeValue, float64(c.commits.checkpointEnd()))
}
