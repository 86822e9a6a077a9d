package node

import (
	"context"
	"fmt"
	"time"

	"orderlog/ingest/batch"
	"orderlog/ingest/ledger"
	"orderlog/ingest/retention"
	"orderlog/reader"
)

// RetentionConfig is how much of the log the cluster keeps (DESIGN.md §8,
// "retention"). Every process with a WAL store and a reader runs the
// retention worker; one of them is elected.
type RetentionConfig struct {
	// Policy: by age and by bytes; zero keeps everything.
	Policy retention.Policy
	// Interval between passes; default 1 s.
	Interval time.Duration
	// DeleteGrace: a ledger is deleted only once closed this long, and
	// below a log start set at least this long ago (default 1 s).
	DeleteGrace time.Duration
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

// noteTopics hands the topics' retentions to the reader (which hides what
// they expire) and their byte limits to ingest (which counts the limited
// topics' bytes in its ledgers).
func (s *Server) noteTopics(topics retention.Topics) {
	if s.reader != nil {
		s.reader.SetTopicRetention(topics.Retentions())
	}
	if s.ingest != nil {
		s.ingest.SetByteLimitedTopics(topics.ByteLimited())
	}
}

// readLog reads the committed messages in [from, to) through the node's
// reader, for the retained set.
func (s *Server) readLog(ctx context.Context, from, to uint64, fn func(retention.Kept) error) error {
	for from < to {
		page, err := s.reader.ReadPage(ctx, from, 1000, reader.Filter{})
		if err != nil {
			return err
		}
		for _, m := range page.Messages {
			if m.Offset >= to {
				return nil
			}
			k := retention.Kept{Offset: m.Offset, IngestTimeMicros: m.IngestTimeUs, ProducerID: m.ProducerId, Seq: m.ProducerSeq,
				Record: batch.FromProto(m.Message)}
			if err := fn(k); err != nil {
				return err
			}
		}
		if page.NextOffset <= from {
			return fmt.Errorf("read [%d, %d): no progress at %d", from, to, from)
		}
		from = page.NextOffset
	}
	return nil
}

// startRetention runs the retention worker until ctx ends. It needs the
// local reader's C (the log start never passes it) and a store dialer.
func (s *Server) startRetention(ctx context.Context) {
	if s.store == nil || s.reader == nil {
		return
	}
	commits := s.reader.Commits()
	s.retentionMetrics = retention.NewMetrics(nil)
	policy := s.cfg.Retention.Policy
	// Archived offsets stay on the nodes' disks for the hot window
	// (--retention, if set, instead), whichever node archives.
	hotWindow := s.cfg.Archive.HotWindow
	if hotWindow <= 0 {
		hotWindow = defaultHotWindow
	}
	w, err := retention.New(retention.Config{Etcd: s.cli, Stores: s.dialer, Name: s.cfg.NodeName + "/" + s.store.StoreID(),
		Policy: policy, Archived: s.archivedWatermark, AwaitArchive: s.archive != nil, HotWindow: hotWindow, ProducerExpiry: max(0, s.cfg.Ingest.ProducerExpiry), Interval: s.cfg.Retention.Interval,
		DeleteGrace: s.cfg.Retention.DeleteGrace,
		Committed: func() (uint64, bool) {
			epoch, committed := commits.Committed()
			return committed, epoch != 0
		},
		Logger: s.logger, Metrics: s.retentionMetrics, ReadLog: s.readLog,
		Ledgers: retention.LedgerMaker{Etcd: s.cli, Stores: s.dialer, W: s.cfg.Ingest.W, AckQuorum: s.cfg.Ingest.A, Tolerate: s.cfg.Ingest.Tolerate,
			Ensemble: func(ctx context.Context) ([]ledger.Member, error) {
				return chooseEnsemble(ctx, s.cli, s.cfg.Ingest.W, s.store.StoreID())
			}}})
	if err != nil {
		s.logger.Error("retention worker not started", "err", err)
		return
	}
	go w.Run(ctx)
}
