package tiering

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"orderlog/internal/campaign"
	"orderlog/internal/event"
	"orderlog/internal/keys"
	"orderlog/tiering/objstore"
	"orderlog/tiering/parquetfile"
)

// Config configures a tiering worker. Every process that can read the log
// runs one; one of them is elected.
type Config struct {
	Etcd  *clientv3.Client
	Store objstore.Store
	Log   LogSource
	// LogStart is the log's start offset: a new archive starts there.
	LogStart func() uint64
	// Name is this process's election value (the same across restarts).
	Name string
	// Prefix is where files go under the store ("" for its root).
	Prefix string
	Cut    CutPolicy
	// Writer's Keys, when set, encrypt the files this worker writes.
	Writer parquetfile.WriterOptions
	// Keys decrypt an encrypted object found under a planned key (a 412:
	// an earlier attempt's), to compare its footer. Nil: no keys.
	Keys *parquetfile.Keys
	// Schemas resolves the rows' schema_version and the schemas written
	// under _schemas/ (docs/format/archive.md); nil: every
	// schema_version is null and no schema is written.
	Schemas SchemaResolver
	// TempDir holds the file being built (created; leftovers removed).
	TempDir string
	// Interval between passes. Default 1 s.
	Interval   time.Duration
	SessionTTL int
	Logger     *slog.Logger
	Metrics    *Metrics
	Now        func() time.Time
}

// Validate fills defaults and rejects nonsense.
func (c *Config) Validate() error {
	switch {
	case c.Etcd == nil || c.Store == nil || c.Log == nil || c.LogStart == nil:
		return errors.New("tiering: etcd, an object store, a log source and the log start are needed")
	case c.TempDir == "":
		return errors.New("tiering: no local directory to build files in")
	case c.Cut.FileBytes <= 0 || c.Cut.FileAge <= 0:
		return errors.New("tiering: a file's size and age limits must be positive")
	}
	if c.Interval <= 0 {
		c.Interval = time.Second
	}
	if c.SessionTTL <= 0 {
		c.SessionTTL = 5
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	c.Logger = event.OrDiscard(c.Logger)
	return nil
}

// Worker archives the committed log (docs/design.md §8).
type Worker struct {
	cfg Config
	// publishedT is T after the last file this worker published.
	publishedT uint64
	// schemasWritten are the schema objects this worker put or found
	// (immutable: never put again).
	schemasWritten map[topicVersion]bool
}

// New returns a worker; call Run.
func New(cfg Config) (*Worker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Worker{cfg: cfg, schemasWritten: map[topicVersion]bool{}}, nil
}

// Run campaigns and, while elected, archives until ctx ends.
func (w *Worker) Run(ctx context.Context) {
	campaign.Run(ctx, campaign.Config{Etcd: w.cfg.Etcd, Prefix: keys.TieringElection, Name: w.cfg.Name,
		SessionTTL: w.cfg.SessionTTL, Logger: w.cfg.Logger, What: "tiering"}, w.lead)
}

// leader is one term's state: the file being built, and a finished file
// whose publish failed (kept for the next pass, not built again).
type leader struct {
	key   string // the election key, compared in every transaction
	epoch int64  // its create revision
	build *build
	ready *ready
}

// ready is a finished local file of a recorded plan, not yet published.
type ready struct {
	plan  Plan
	build *build
	file  built
}

func (l *leader) discard() {
	l.build.discard()
	l.build = nil
	if l.ready != nil {
		l.ready.build.discard()
		l.ready = nil
	}
}

// maxBackoff bounds the pause after failed passes (an object store that
// is down): the pause doubles from the interval up to it.
const maxBackoff = 10 * time.Second

func (w *Worker) lead(ctx context.Context, key string) {
	l := &leader{key: key}
	defer l.discard()
	if err := w.prepare(ctx, l); err != nil {
		w.cfg.Logger.Warn("tiering: cannot start", "err", err)
		return
	}
	w.cfg.Logger.Info("tiering worker elected", "name", w.cfg.Name, "archive", w.cfg.Store.Describe())
	pause := w.cfg.Interval
	for ctx.Err() == nil {
		t := w.publishedT
		err := w.Pass(ctx, l)
		if err == nil && w.publishedT > t {
			continue // published a file: the next may be ready at once (catching up)
		}
		switch {
		case errors.Is(err, ErrConflict) || errors.Is(err, ErrLogStartPassed):
			w.cfg.Metrics.observeConflict()
			w.cfg.Logger.Error("tiering halted: the archive will not go on until an operator looks", "err", err)
			<-ctx.Done() // keep the election: no other worker repeats it
			return
		case err != nil && ctx.Err() == nil:
			w.cfg.Logger.Warn("tiering pass failed", "err", err, "retry_in", pause)
		}
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
		pause = nextPause(pause, w.cfg.Interval, err)
	}
}

// nextPause is the pause after a pass that paused the last time and
// ended with err: the interval after a success, else double the last,
// up to maxBackoff (or the interval, if longer).
func nextPause(last, interval time.Duration, err error) time.Duration {
	if err == nil {
		return interval
	}
	return min(2*last, max(maxBackoff, interval))
}

// prepare reads the election key's revision and clears the local
// directory of an earlier term's files.
func (w *Worker) prepare(ctx context.Context, l *leader) error {
	resp, err := w.cfg.Etcd.Get(ctx, l.key)
	if err != nil {
		return err
	}
	if len(resp.Kvs) == 0 {
		return errors.New("the election key is gone")
	}
	l.epoch = resp.Kvs[0].CreateRevision
	if err := os.MkdirAll(w.cfg.TempDir, 0o755); err != nil {
		return err
	}
	old, _ := filepath.Glob(filepath.Join(w.cfg.TempDir, "building-*.parquet"))
	for _, f := range old {
		os.Remove(f)
	}
	return nil
}

// Pass publishes a recorded plan, or extends the file being built and
// publishes it once it is cut.
func (w *Worker) Pass(ctx context.Context, l *leader) error {
	head, err := ReadHead(ctx, w.cfg.Etcd)
	if err != nil {
		return err
	}
	if head.ModRevision == 0 {
		if head, err = startHead(ctx, w.cfg.Etcd, l.key); err != nil {
			return err
		}
	}
	w.cfg.Metrics.observeHead(head)
	if start := w.cfg.LogStart(); start > head.T {
		return fmt.Errorf("%w: the start is %d, the archive reaches %d", ErrLogStartPassed, start, head.T)
	}
	plan, err := readPlan(ctx, w.cfg.Etcd)
	if err != nil {
		return err
	}
	committed, known := w.cfg.Log.Committed()
	if !known {
		return nil
	}
	if plan.ModRevision != 0 {
		return w.publishPlanned(ctx, l, head, plan, committed)
	}
	if l.build == nil || l.build.cut.first != head.T {
		l.discard()
		l.build, err = newBuild(w.cfg.TempDir, head.T, w.cfg.Cut, w.cfg.Writer, newFileSchemas(w.cfg.Schemas, unbounded))
		if err != nil {
			return err
		}
	}
	end, err := l.build.extend(ctx, w.cfg.Log, committed, 0, w.cfg.Now())
	if err != nil || end == 0 {
		if err != nil {
			l.discard()
		}
		return err
	}
	b := l.build
	l.build = nil
	plan = Plan{Version: stateVersion, Epoch: l.epoch, First: head.T, End: end,
		Object:   parquetfile.ObjectKey(w.cfg.Prefix, head.T, end, time.UnixMicro(firstMicroOr(b, w.cfg.Now()))),
		Manifest: joinKey(w.cfg.Prefix, manifestKey(head.T, end))}
	if plan, err = putPlan(ctx, w.cfg.Etcd, head, plan, l.key); err != nil {
		b.discard()
		return err
	}
	crashPoint(afterPlan)
	if settled, err := b.schemas.settle(ctx, plan.ModRevision); err != nil || !settled {
		// The plan stands; the next pass builds its file again, under it.
		b.discard()
		if err == nil {
			w.cfg.Logger.Info("tiering: a schema id of the file was registered under its topic before the plan; building it again",
				"first", plan.First, "end", plan.End)
		}
		return err
	}
	return w.finishAndPublish(ctx, l, head, plan, b)
}

// publishPlanned publishes a recorded plan: the file this term already
// finished for it, or else its range built again from the log, under the
// recorded keys. A plan reaching beyond C waits (a successor's reader may
// not have caught up yet).
func (w *Worker) publishPlanned(ctx context.Context, l *leader, head Head, plan Plan, committed uint64) error {
	if r := l.ready; r != nil && r.plan == plan {
		return w.publishBuilt(ctx, l, head, *r)
	}
	l.discard()
	if plan.First != head.T || plan.End <= plan.First {
		return fmt.Errorf("%w: the recorded plan [%d, %d) does not start at T=%d", ErrConflict, plan.First, plan.End, head.T)
	}
	if plan.End > committed {
		w.cfg.Logger.Info("tiering: the recorded plan ends beyond C; waiting", "end", plan.End, "committed", committed)
		return nil
	}
	b, err := newBuild(w.cfg.TempDir, plan.First, w.cfg.Cut, w.cfg.Writer, newFileSchemas(w.cfg.Schemas, plan.ModRevision))
	if err != nil {
		return err
	}
	if _, err := b.extend(ctx, w.cfg.Log, committed, plan.End, w.cfg.Now()); err != nil {
		b.discard()
		return err
	}
	w.cfg.Logger.Info("tiering: publishing a recorded plan", "first", plan.First, "end", plan.End, "object", plan.Object, "planned_by", plan.Epoch)
	return w.finishAndPublish(ctx, l, head, plan, b)
}

// finishAndPublish closes the local file at the plan's end and publishes
// it; it owns b.
func (w *Worker) finishAndPublish(ctx context.Context, l *leader, head Head, plan Plan, b *build) error {
	meta, size, err := b.finish(plan.End)
	if err != nil {
		b.discard()
		return err
	}
	return w.publishBuilt(ctx, l, head, ready{plan: plan, build: b, file: newBuilt(b, plan, meta, size)})
}

// publishBuilt uploads a finished file, puts its manifest segment and
// moves T. On failure the file is kept for the next pass (l.ready); it is
// removed once published.
func (w *Worker) publishBuilt(ctx context.Context, l *leader, head Head, r ready) error {
	l.ready = &r
	f := r.file
	// The schemas first: a row never names a schema whose object is
	// absent, for readers of the manifest or of a listing of the prefix.
	if err := putSchemas(ctx, w.cfg.Store, w.cfg.Prefix, r.build.schemas, w.schemasWritten); err != nil {
		if errors.Is(err, ErrConflict) {
			l.discard()
		}
		return fmt.Errorf("schemas of %s: %w", r.plan.Object, err)
	}
	up, err := upload(ctx, w.cfg.Store, w.cfg.Keys, r.build, f)
	if err != nil {
		if errors.Is(err, ErrConflict) {
			l.discard() // the worker halts; nothing will publish this file
		}
		return fmt.Errorf("upload %s: %w", r.plan.Object, err)
	}
	f.entry.Bytes = up.size
	if _, encrypting := w.cfg.Writer.Keys.Current(); encrypting && up.adoptedInClear {
		// The rows are the log's, so the object is kept (nothing is
		// overwritten), but the archive holds them in clear.
		w.cfg.Logger.Warn("tiering: adopted an archive object in clear although files are encrypted",
			"object", r.plan.Object, "first", f.meta.First, "end", f.meta.End)
		w.cfg.Metrics.observeAdoptedInClear()
	}
	crashPoint(afterUpload)
	entry, err := putManifest(ctx, w.cfg.Store, r.plan.Manifest, f.entry)
	if err != nil {
		return fmt.Errorf("manifest %s: %w", r.plan.Manifest, err)
	}
	crashPoint(afterManifest)
	next, err := commitFile(ctx, w.cfg.Etcd, head, r.plan, entry, l.key)
	if err != nil {
		return err
	}
	l.discard()
	w.publishedT = next.T
	w.cfg.Metrics.observeHead(next)
	w.cfg.Metrics.observePublished(entry)
	w.cfg.Logger.Info("tiering: file published", "object", r.plan.Object, "first", r.plan.First, "end", r.plan.End,
		"rows", entry.Rows, "holes", len(entry.Holes), "bytes", entry.Bytes, "t", next.T)
	return nil
}

// firstMicroOr is the file's first row's ingest time, or now for a file
// of holes only (its dt partition is the day it was published).
func firstMicroOr(b *build, now time.Time) int64 {
	if b.firstMicro != 0 {
		return b.firstMicro
	}
	return now.UnixMicro()
}

func joinKey(prefix, key string) string {
	if prefix == "" {
		return key
	}
	return prefix + "/" + key
}
