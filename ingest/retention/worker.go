package retention

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"orderlog/ingest/ledger"
	"orderlog/internal/campaign"
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
	// Interval is the pause between passes. Default 1 s.
	Interval time.Duration
	// Archived, if set, returns the archived watermark T (and false
	// before the archive has one): the log start never passes it, as
	// reads below the start are then served from the archive. It caps
	// the start whenever an archive exists, whether or not this process
	// archives: another node's worker may be the one elected.
	Archived func(context.Context) (uint64, bool, error)
	// AwaitArchive: this process archives, so before the archive has a
	// watermark the start waits where it is. Without it, and with no
	// archive yet, the start moves (and its move fails if an archive
	// begins meanwhile).
	AwaitArchive bool
	// HotWindow is the age limit while an archive exists and Policy has
	// none: archived messages stay on the disks this long. It applies
	// whichever node archives.
	HotWindow time.Duration
	// DeleteGrace: ledgers are deleted only below a log start that stood
	// this long, and once closed this long. Default 1 s; negative: none.
	DeleteGrace time.Duration
	// SessionTTL is the election session's TTL in seconds. Default 5.
	SessionTTL int
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Logger logs elections, the log start's moves and failures; nil
	// discards.
	Logger *slog.Logger
	// Metrics, if set, counts what passes do.
	Metrics *Metrics
	// ReadLog reads the committed messages in [from, to) in offset order
	// (the node's reader), and Ledgers makes the retained set's ledgers:
	// both are needed only once a topic keeps messages below the log
	// start (compacted topics, longer topic retention). Nil ReadLog: such
	// topics are deleted like the others.
	ReadLog func(ctx context.Context, from, to uint64, fn func(Kept) error) error
	Ledgers LedgerMaker
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
		c.Interval = time.Second
	}
	if c.DeleteGrace == 0 {
		c.DeleteGrace = time.Second
	}
	c.DeleteGrace = max(0, c.DeleteGrace)
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
	// electionKey is this worker's key in the election while it leads: the
	// retained ledgers it creates compare it.
	electionKey string
	// starts are the log starts passes read, with when each was first
	// read, oldest first: deletions go only below one that stood for
	// DeleteGrace.
	starts []seenStart
	stood  uint64 // the highest start that stood for the grace
}

type seenStart struct {
	start uint64
	at    time.Time
}

// noteStart notes the log start as read or set at now.
func (w *Worker) noteStart(start uint64, now time.Time) {
	if n := len(w.starts); n == 0 || w.starts[n-1].start != start {
		w.starts = append(w.starts, seenStart{start, now})
	}
}

// stoodStart notes start as read now and returns the highest start read
// or set at least grace ago (0 if none).
func (w *Worker) stoodStart(start uint64, now time.Time) uint64 {
	w.noteStart(start, now)
	for len(w.starts) > 0 && now.Sub(w.starts[0].at) >= w.cfg.DeleteGrace {
		w.stood = max(w.stood, w.starts[0].start)
		if len(w.starts) == 1 {
			break
		}
		w.starts = w.starts[1:]
	}
	return w.stood
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
	campaign.Run(ctx, campaign.Config{Etcd: w.cfg.Etcd, Prefix: keys.RetentionElection, Name: w.cfg.Name,
		SessionTTL: w.cfg.SessionTTL, Logger: w.cfg.Logger, What: "retention"}, w.lead)
}

// lead runs passes while this worker is elected (key is its election key).
func (w *Worker) lead(ctx context.Context, key string) {
	w.electionKey = key
	w.cfg.Logger.Info("retention worker elected", "name", w.cfg.Name)
	for {
		wait := w.cfg.Interval
		if err := w.Pass(ctx); err != nil && ctx.Err() == nil {
			w.cfg.Logger.Warn("retention pass failed", "err", err)
		} else {
			wait = w.nextPassIn(w.cfg.Now())
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// nextPassIn is the wait before the next pass: the interval, or less when
// a start moved earlier stands for the grace sooner, so that the ledgers
// below it go then rather than up to an interval later (the data
// directory holds what is written in between on top of the retention).
func (w *Worker) nextPassIn(now time.Time) time.Duration {
	wait := w.cfg.Interval
	if w.cfg.DeleteGrace == 0 {
		return wait // the start's own pass deletes below it
	}
	for _, s := range w.starts {
		if s.start > w.stood {
			wait = min(wait, max(w.cfg.Interval/10, s.at.Add(w.cfg.DeleteGrace).Sub(now)))
			break
		}
	}
	return wait
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
	pinned := Pins(state.producers, state.ledgers)
	for id := range state.retained.pinned(now, w.cfg.DeleteGrace) {
		pinned[id] = true
	}
	ceiling, capped, archived, err := w.ceiling(ctx, state.start)
	if err != nil {
		return err
	}
	state.noArchive = w.cfg.Archived != nil && !capped
	policy := w.cfg.Policy
	if archived && policy.Age == 0 {
		policy.Age = w.cfg.HotWindow
	}
	in := Input{Ledgers: state.ledgers, Deleting: state.deleting, Pinned: pinned, Retained: state.retained.ids(),
		Committed: committed, Start: state.start, Ceiling: ceiling, Capped: capped, Now: now, DeleteUpTo: w.stoodStart(state.start, now), Grace: w.cfg.DeleteGrace,
		CheckpointLedger: state.checkpointLedger, CheckpointFirst: state.checkpointFirst}
	if w.cfg.DeleteGrace == 0 {
		in.DeleteUpTo = math.MaxUint64 // the new start, in this pass
	}
	decision := Plan(in, policy)
	// Neither the topics' records nor their starts may stop deletion: the
	// disk would fill. Without the policies the start waits (the retained
	// set needs them); without the starts the set drops less.
	policies, err := readPolicies(ctx, w.cfg.Etcd, w.cfg.Logger)
	if err != nil {
		w.cfg.Logger.Warn("retention: cannot read the topics' policies; the log start waits", "err", err)
	} else if err := w.moveTopicStarts(ctx, state, policies); err != nil {
		w.cfg.Logger.Warn("retention: cannot move the topics' starts", "err", err)
	}
	if decision.Start > state.start && policies != nil {
		// The retained set is switched in the same transaction: in etcd
		// the set always reaches the start, and a reader that has the new
		// start but not yet the new set answers UNAVAILABLE below it.
		set, err := w.extendRetained(ctx, state, policies, decision.Start, now)
		if err != nil {
			return err
		}
		if err := moveStart(ctx, w.cfg.Etcd, state, decision.Start, set, w.electionKey); err != nil {
			return err
		}
		// The grace counts from the move's commit, not from the pass's
		// start: the rebuild before it may take a while.
		w.noteStart(decision.Start, w.cfg.Now())
		w.cfg.Logger.Info("retention: log start moved", "from", state.start, "to", decision.Start)
	} else if decision.Start > state.start {
		// The start waits (no policies): nothing at or above the start
		// that stands may be deleted, whatever the grace.
		in.DeleteUpTo = min(in.DeleteUpTo, state.start)
		decision = Plan(in, policy)
		decision.Start = state.start
	}
	w.recoverAbandoned(ctx, state)
	w.cfg.Metrics.observeStart(decision.Start)
	for _, p := range Orphans(state.producers, state.ledgers, decision.Start, w.cfg.ProducerExpiry, now) {
		if err := expireOrphan(ctx, w.cfg.Etcd, p); err != nil {
			w.cfg.Logger.Warn("retention: cannot expire an orphaned producer", "producer", p.ID, "err", err)
			continue
		}
		w.cfg.Logger.Info("retention: expired a producer whose owner is gone", "producer", p.ID)
	}
	marked := make(map[uint64]bool)
	for _, m := range decision.Delete {
		if err := mark(ctx, w.cfg.Etcd, m, w.electionKey); err != nil {
			w.noteFailure(m.ID, err)
			continue
		}
		state.deleting[m.ID], marked[m.ID] = true, true
	}
	if err := w.unmarkPinned(ctx, state, marked); err != nil {
		return err
	}
	w.deleteMarked(ctx, state)
	return nil
}

// ceiling is the archived watermark the log start must not pass (capped
// false: no archive); before the archive has one, the current start if
// this process archives (AwaitArchive), else none. archived: the archive
// has a watermark.
func (w *Worker) ceiling(ctx context.Context, start uint64) (ceiling uint64, capped, archived bool, err error) {
	if w.cfg.Archived == nil {
		return 0, false, false, nil
	}
	t, ok, err := w.cfg.Archived(ctx)
	switch {
	case err != nil:
		return 0, false, false, fmt.Errorf("read the archived watermark: %w", err)
	case ok:
		return t, true, true, nil
	case w.cfg.AwaitArchive:
		return start, true, false, nil
	}
	return 0, false, false, nil
}

// unmarkPinned reads the producer records again once the pass's ledgers
// are marked, and takes the mark back from any that a record now pins: the
// pins were read before the marks, and a state recorded in between (a
// takeover's, or a roll's advance) could name one. From the mark on, no
// record can name a marked ledger (recording compares the mark), so this
// read is final.
func (w *Worker) unmarkPinned(ctx context.Context, state clusterState, marked map[uint64]bool) error {
	if len(marked) == 0 {
		return nil
	}
	producers, err := readProducers(ctx, w.cfg.Etcd)
	if err != nil {
		return err
	}
	for id := range Pins(producers, state.ledgers) {
		if !marked[id] {
			continue
		}
		if err := unmark(ctx, w.cfg.Etcd, id); err != nil {
			return err
		}
		delete(state.deleting, id)
		w.cfg.Logger.Info("retention: a producer's state needs a ledger after all; kept", "ledger", id)
	}
	return nil
}

// extendRetained returns the retained set for a log start moving to
// start: when a topic keeps messages below it (or the set holds some), the
// set's messages merged with those in [set end, start), compacted and
// written to new ledgers; otherwise the set as it is, ending at start. The
// caller switches it with the start. The old set's ledgers stay pinned for
// the deletion grace (readers may still read them), then go.
func (w *Worker) extendRetained(ctx context.Context, state clusterState, policies map[string]TopicPolicy, start uint64, now time.Time) (Retained, error) {
	old := state.retained
	next := Retained{End: max(start, old.End), Ledgers: old.Ledgers, Previous: old.Previous, SwitchedAt: old.SwitchedAt}
	anyKeeps := slices.ContainsFunc(slices.Collect(maps.Values(policies)), TopicPolicy.keeps)
	if w.cfg.ReadLog == nil || (!anyKeeps && len(old.Ledgers) == 0) || start <= old.End {
		return next, nil // nothing to keep, or kept already
	}
	var added []Kept
	from := max(old.End, state.start) // below the start nothing is left to read
	err := w.cfg.ReadLog(ctx, from, start, func(k Kept) error {
		if policies[k.Record.Topic].keeps() {
			added = append(added, k)
		}
		return nil
	})
	if err != nil {
		return Retained{}, fmt.Errorf("read [%d, %d) for the retained set: %w", from, start, err)
	}
	kept, err := readRetained(ctx, w.cfg.Etcd, w.cfg.Stores, old)
	if err != nil {
		return Retained{}, err
	}
	set := Compact(kept, added, policies, now)
	ledgers, err := writeRetained(ctx, w.cfg.Ledgers, set, "retention/"+w.cfg.Name, w.electionKey)
	if err != nil {
		return Retained{}, err
	}
	w.cfg.Logger.Info("retention: retained set rebuilt", "end", start, "messages", len(set), "was", len(kept),
		"added", len(added), "ledgers", len(ledgers))
	// Switched once written: the old set's grace counts from about the
	// switch, not from the pass's start.
	return Retained{End: start, Ledgers: ledgers, Previous: slices.Collect(maps.Keys(old.ids())), SwitchedAt: w.cfg.Now().UnixMilli()}, nil
}

// moveTopicStarts moves the starts of the topics with a byte limit
// (topicstarts.go) and notes each topic's in policies, for the retained
// set's rebuild to drop what lies below it.
func (w *Worker) moveTopicStarts(ctx context.Context, state clusterState, policies map[string]TopicPolicy) error {
	if state.topicStartsErr != nil {
		return state.topicStartsErr
	}
	limits := make(map[string]int64)
	for topic, p := range policies {
		if p.Bytes > 0 {
			limits[topic] = p.Bytes
		}
	}
	next := NextTopicStarts(state.topicStarts, limits, state.ledgers, state.start, state.retained.ids())
	if !maps.Equal(next, state.topicStarts) {
		if err := writeTopicStarts(ctx, w.cfg.Etcd, next, state.topicStartsRevision, w.electionKey); err != nil {
			return err
		}
		for topic, start := range next {
			if start > state.topicStarts[topic] {
				w.cfg.Logger.Info("retention: a topic's byte limit moved its start", "topic", topic, "from", state.topicStarts[topic], "to", start)
			}
		}
	}
	for topic, start := range next {
		if p, ok := policies[topic]; ok {
			p.Start = start
			policies[topic] = p
		}
	}
	return nil
}

// recoverAbandoned closes the retained-set ledgers a crashed or deposed
// worker left open (a rebuild that stopped while writing): closed, they are
// below the start and unpinned, and the normal rule deletes them.
func (w *Worker) recoverAbandoned(ctx context.Context, state clusterState) {
	for _, m := range state.ledgers {
		if m.Kind != ledger.KindRetained || m.State == ledger.StateClosed || m.WriterIncarnation == "retention/"+w.cfg.Name {
			continue
		}
		if _, err := ledger.Recover(ctx, w.cfg.Etcd, m.ID, ledger.RecoverOptions{Stores: w.cfg.Stores}); err != nil {
			w.noteFailure(m.ID, err)
		}
	}
}

// deleteMarked finishes every marked ledger's deletion it can.
//
// A mark whose ledger record is gone goes too: the sequencer deletes the
// checkpoint ledgers it no longer needs itself (copies first, then the
// record), and may do so while retention has one marked.
func (w *Worker) deleteMarked(ctx context.Context, state clusterState) {
	recorded := make(map[uint64]bool, len(state.ledgers))
	for _, m := range state.ledgers {
		recorded[m.ID] = true
	}
	for id := range state.deleting {
		if !recorded[id] {
			if err := unmark(ctx, w.cfg.Etcd, id); err != nil {
				w.noteFailure(id, err)
			}
		}
	}
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
