package retention

import (
	"context"
	"errors"
	"log/slog"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"orderlog/ingest/ledger"
	"orderlog/internal/event"
	"orderlog/internal/keys"
)

// Config configures a Worker.
type Config struct {
	// Etcd holds the ledger metadata, producer records, the log start and
	// the election.
	Etcd *clientv3.Client
	// Stores reaches the WAL stores, for DeleteLedger.
	Stores ledger.Dialer
	// Name identifies this process in the election.
	Name string
	// Policy is what is kept. A zero Policy keeps everything: the worker
	// only finishes deletions a predecessor began.
	Policy Policy
	// ProducerExpiry expires producers whose owner is gone (Orphans); 0
	// never does.
	ProducerExpiry time.Duration
	// Committed returns C and whether it is known yet (a reader that has
	// not heard a watermark since it started does not know it).
	Committed func() (uint64, bool)
	// Interval is the pause between passes. Default 10 s.
	Interval time.Duration
	// SessionTTL is the election session's TTL in seconds. Default 5.
	SessionTTL int
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Logger logs elections, the log start's moves and failures; nil
	// discards.
	Logger *slog.Logger
	// Metrics, if set, counts what passes do.
	Metrics *Metrics
}

// Validate fills defaults and rejects nonsense.
func (c *Config) Validate() error {
	switch {
	case c.Etcd == nil:
		return errors.New("retention: no etcd client")
	case c.Stores == nil:
		return errors.New("retention: no store dialer")
	case c.Committed == nil:
		return errors.New("retention: no committed watermark")
	case c.Interval < 0 || c.SessionTTL < 0 || c.Policy.Age < 0 || c.Policy.Bytes < 0 || c.ProducerExpiry < 0:
		return errors.New("retention: negative setting")
	}
	if c.Interval == 0 {
		c.Interval = 10 * time.Second
	}
	if c.SessionTTL == 0 {
		c.SessionTTL = 5
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	c.Logger = event.OrDiscard(c.Logger)
	return nil
}

// Worker applies retention while it is the elected one.
type Worker struct {
	cfg Config
	// failures keeps the last failure logged per ledger, so one that
	// repeats every pass (a store down) is logged once.
	failures map[uint64]string
}

// New returns a worker; call Run.
func New(cfg Config) (*Worker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Worker{cfg: cfg, failures: map[uint64]string{}}, nil
}

// Run campaigns and, while elected, runs a pass every Interval until ctx
// ends. A lost session campaigns again.
func (w *Worker) Run(ctx context.Context) {
	for ctx.Err() == nil {
		if err := w.lead(ctx); err != nil && ctx.Err() == nil {
			w.cfg.Logger.Warn("retention: election failed, retrying", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}

func (w *Worker) lead(ctx context.Context) error {
	session, err := concurrency.NewSession(w.cfg.Etcd, concurrency.WithTTL(w.cfg.SessionTTL), concurrency.WithContext(ctx))
	if err != nil {
		return err
	}
	defer session.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-session.Done():
			cancel()
		case <-ctx.Done():
		}
	}()
	if err := concurrency.NewElection(session, keys.RetentionElection).Campaign(ctx, w.cfg.Name); err != nil {
		return err
	}
	w.cfg.Logger.Info("retention worker elected", "name", w.cfg.Name)
	for {
		if err := w.Pass(ctx); err != nil && ctx.Err() == nil {
			w.cfg.Logger.Warn("retention pass failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(w.cfg.Interval):
		}
	}
}

// Pass plans once, moves the log start, expires orphaned producers, marks
// the ledgers to delete and deletes every marked one it can.
func (w *Worker) Pass(ctx context.Context) error {
	state, err := readState(ctx, w.cfg.Etcd)
	if err != nil {
		return err
	}
	committed, known := w.cfg.Committed()
	if !known {
		committed = state.start // nothing moves before C is known
	}
	now := w.cfg.Now()
	in := Input{Ledgers: state.ledgers, Deleting: state.deleting, Pinned: Pins(state.producers, state.ledgers),
		Committed: committed, Start: state.start, Now: now}
	decision := Plan(in, w.cfg.Policy)
	if decision.Start > state.start {
		if err := moveStart(ctx, w.cfg.Etcd, state, decision.Start); err != nil {
			return err
		}
		w.cfg.Logger.Info("retention: log start moved", "from", state.start, "to", decision.Start)
	}
	w.cfg.Metrics.observeStart(decision.Start)
	for _, p := range Orphans(state.producers, state.ledgers, decision.Start, w.cfg.ProducerExpiry, now) {
		if err := expireOrphan(ctx, w.cfg.Etcd, p.ID); err != nil {
			w.cfg.Logger.Warn("retention: cannot expire an orphaned producer", "producer", p.ID, "err", err)
			continue
		}
		w.cfg.Logger.Info("retention: expired a producer whose owner is gone", "producer", p.ID)
	}
	for _, m := range decision.Delete {
		if err := mark(ctx, w.cfg.Etcd, m); err != nil {
			w.noteFailure(m.ID, err)
			continue
		}
		state.deleting[m.ID] = true
	}
	w.deleteMarked(ctx, state)
	return nil
}

// deleteMarked finishes every marked ledger's deletion it can.
func (w *Worker) deleteMarked(ctx context.Context, state clusterState) {
	for _, m := range state.ledgers {
		if !state.deleting[m.ID] {
			continue
		}
		if err := deleteLedger(ctx, w.cfg.Etcd, w.cfg.Stores, m); err != nil {
			w.noteFailure(m.ID, err)
			continue
		}
		delete(w.failures, m.ID)
		w.cfg.Metrics.observeDeleted(m)
	}
}

func (w *Worker) noteFailure(id uint64, err error) {
	if text := err.Error(); w.failures[id] != text {
		w.failures[id] = text
		w.cfg.Logger.Warn("retention: ledger deletion waits", "ledger", id, "err", err)
	}
}
