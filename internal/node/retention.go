package node

import (
	"context"
	"time"

	"orderlog/ingest/retention"
)

// RetentionConfig is how much of the log the cluster keeps (DESIGN.md §8,
// "retention"). Every process with a WAL store and a reader runs the
// retention worker; one of them is elected.
type RetentionConfig struct {
	// Policy: by age and by bytes; zero keeps everything.
	Policy retention.Policy
	// Interval between passes; default 10 s.
	Interval time.Duration
}

// noteLogStart keeps the log start retention moved to, for the reader
// (which refuses reads below it) and the sequencer's checkpoints.
func (s *Server) noteLogStart(start uint64) {
	if start > s.logStart.Load() {
		s.logStart.Store(start)
	}
	if s.reader != nil {
		s.reader.SetLogStart(start)
	}
}

// startRetention runs the retention worker until ctx ends. It needs the
// local reader's C (the log start never passes it) and a store dialer.
func (s *Server) startRetention(ctx context.Context) {
	if s.store == nil || s.reader == nil {
		return
	}
	commits := s.reader.Commits()
	s.retentionMetrics = retention.NewMetrics(nil)
	w, err := retention.New(retention.Config{Etcd: s.cli, Stores: s.dialer, Name: s.cfg.NodeName + "/" + s.store.StoreID(),
		Policy: s.cfg.Retention.Policy, ProducerExpiry: s.cfg.Ingest.ProducerExpiry, Interval: s.cfg.Retention.Interval,
		Committed: func() (uint64, bool) {
			epoch, committed := commits.Committed()
			return committed, epoch != 0
		},
		Logger: s.logger, Metrics: s.retentionMetrics})
	if err != nil {
		s.logger.Error("retention worker not started", "err", err)
		return
	}
	go w.Run(ctx)
}
