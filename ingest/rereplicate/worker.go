package rereplicate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"orderlog/ingest/ledger"
	"orderlog/ingest/retention"
	"orderlog/internal/campaign"
	"orderlog/internal/event"
	"orderlog/internal/keys"
	"orderlog/proto/walpb"
)

// Config configures a Worker.
type Config struct {
	// Etcd holds the ledger metadata, store registrations and the election.
	Etcd *clientv3.Client
	// Stores reaches the WAL stores.
	Stores ledger.Dialer
	// Name identifies this process in the election.
	Name string
	// Grace is how long a store's registration may be gone before its
	// copies count as lost (a restart takes less). Default 1 min.
	Grace time.Duration
	// Interval is the pause between passes. Default 10 s.
	Interval time.Duration
	// SessionTTL is the election session's TTL in seconds. Default 5.
	SessionTTL int
	// Now is the clock (default time.Now); Grace is measured with it.
	Now func() time.Time
	// Logger logs elections and failures (once per ledger and error);
	// nil discards.
	Logger *slog.Logger
	// Events is told of each re-replication (event.Logging logs it).
	Events event.Listener
}

// Validate fills defaults and rejects nonsense.
func (c *Config) Validate() error {
	switch {
	case c.Etcd == nil:
		return errors.New("rereplicate: no etcd client")
	case c.Stores == nil:
		return errors.New("rereplicate: no store dialer")
	case c.Grace < 0 || c.Interval < 0 || c.SessionTTL < 0:
		return errors.New("rereplicate: negative duration")
	}
	if c.Grace == 0 {
		c.Grace = time.Minute
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
	c.Events.EnsureDefaults()
	return nil
}

// Worker re-replicates under-replicated closed ledgers while it is the
// elected one.
type Worker struct {
	cfg Config
	// goneSince is when each unregistered ensemble store was first seen
	// unregistered. Only the Run goroutine touches it.
	goneSince map[string]time.Time
	// failures keeps the last failure logged per ledger, so a failure that
	// repeats every pass is logged once.
	failures map[uint64]string
	// full holds the members seen holding every entry ≤ last of a closed
	// ledger (their answer, or a copy made onto them), so that each is
	// asked once. Only the Run goroutine touches it.
	full map[copyKey]bool
}

// copyKey names one store incarnation's copy of a ledger.
type copyKey struct {
	ledger      uint64
	store       string
	incarnation uint64
}

// New returns a worker; call Run.
func New(cfg Config) (*Worker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Worker{cfg: cfg, goneSince: map[string]time.Time{}, failures: map[uint64]string{}, full: map[copyKey]bool{}}, nil
}

// Run campaigns and, while elected, runs a pass whenever stores or ledgers
// change and at least every Interval, until ctx ends. A lost session
// campaigns again.
func (w *Worker) Run(ctx context.Context) {
	campaign.Run(ctx, campaign.Config{Etcd: w.cfg.Etcd, Prefix: keys.RereplicationElection, Name: w.cfg.Name,
		SessionTTL: w.cfg.SessionTTL, Logger: w.cfg.Logger, What: "re-replication"}, w.lead)
}

// lead runs passes while this worker is elected.
func (w *Worker) lead(ctx context.Context, _ string) {
	w.cfg.Logger.Info("re-replication worker elected", "name", w.cfg.Name)
	changed := w.watchChanges(ctx)
	for {
		if err := w.Pass(ctx); err != nil && ctx.Err() == nil {
			w.cfg.Logger.Warn("re-replication pass failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
			// Let the burst a fault causes (stores coming back, ledgers
			// closing) settle into one pass.
			select {
			case <-ctx.Done():
				return
			case <-time.After(passSettle):
			}
			select {
			case <-changed:
			default:
			}
		case <-time.After(w.cfg.Interval):
		}
	}
}

// passSettle is how long a pass waits after a change it was woken by.
const passSettle = 300 * time.Millisecond

// watchChanges returns a channel that is signalled when a store registers
// or goes, or a ledger's metadata changes (one opens, closes, or changes
// its ensemble): a copy may be owed or possible then, and a pass on the
// next Interval would leave a ledger under-replicated for that long. A
// watch that ends (etcd compacted past it, or failed) is opened again
// after a second, with a signal: what it missed is for a pass to find.
// The watches end with ctx.
func (w *Worker) watchChanges(ctx context.Context) <-chan struct{} {
	changed := make(chan struct{}, 1)
	signal := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	for _, prefix := range []string{keys.StoresPrefix, keys.LedgersPrefix} {
		go func() {
			for ctx.Err() == nil {
				wctx, cancel := context.WithCancel(ctx)
				for resp := range w.cfg.Etcd.Watch(wctx, prefix, clientv3.WithPrefix()) {
					if resp.Err() != nil {
						break
					}
					signal()
				}
				cancel()
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
					signal()
				}
			}
		}()
	}
	return changed
}

// Pass examines every closed ledger once, newest first, and re-replicates
// those with fewer copies than intended. Errors of one ledger are logged
// and do not stop the pass.
func (w *Worker) Pass(ctx context.Context) error {
	live, err := ledger.LiveStores(ctx, w.cfg.Etcd)
	if err != nil {
		return err
	}
	ms, err := ledger.List(ctx, w.cfg.Etcd, ledger.Filter{States: []ledger.State{ledger.StateClosed}})
	if err != nil {
		return err
	}
	// A ledger retention is deleting gets no new copy: its offsets are
	// below the log start, and a copy made now would outlive its record.
	deleting, err := retention.Deleting(ctx, w.cfg.Etcd)
	if err != nil {
		return err
	}
	ms = slices.DeleteFunc(ms, func(m ledger.Metadata) bool { return deleting[m.ID] })
	l := w.observe(live, ms)
	load := map[string]int{}
	for _, m := range ms {
		for _, member := range m.Ensemble {
			load[member.StoreID]++
		}
	}
	w.forgetCopies(ms)
	// Newest first: the ledgers a fault just left degraded are the newest,
	// and a worker elected afresh asks every member of every older one
	// before it trusts it (seconds once the history holds hundreds).
	for _, m := range slices.Backward(ms) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		d := plan(m, l, w.partialMembers(ctx, m, l))
		if d.need == 0 {
			delete(w.failures, m.ID)
			continue
		}
		if err := w.rereplicate(ctx, m, d, targets(d, l.registered, load, d.need), load); err != nil {
			w.noteFailure(m, err)
		}
	}
	return nil
}

// partialMembers asks each member of m registered in the incarnation m
// names, and not yet seen full, which entries it holds. A closed ledger's
// entries are each on at least A members, not on all W: a member that was
// down while the tail was written, or was not among those recovery rolled
// it forward to, holds only a prefix. Such a member (and one that answers
// UNKNOWN: damage in its journal may hide entries of the ledger) is
// returned by store id. A member that cannot be asked now is not.
func (w *Worker) partialMembers(ctx context.Context, m ledger.Metadata, l liveness) map[string]bool {
	partial := map[string]bool{}
	for _, member := range m.Ensemble {
		key := copyKey{ledger: m.ID, store: member.StoreID, incarnation: member.Incarnation}
		reg, registered := l.registered[member.StoreID]
		if w.full[key] || !registered || reg.Incarnation != member.Incarnation {
			continue
		}
		if m.LastEntry < 0 {
			w.full[key] = true
			continue
		}
		resp, err := w.lastEntry(ctx, reg, m.ID)
		switch {
		case err != nil:
		case resp.Status == walpb.EntryStatus_PRESENT && resp.LastEntry >= m.LastEntry:
			w.full[key] = true
		default:
			partial[member.StoreID] = true
		}
	}
	return partial
}

func (w *Worker) lastEntry(ctx context.Context, member ledger.Member, id uint64) (*walpb.LastEntryResponse, error) {
	client, err := w.cfg.Stores.Client(member)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, storeCallTimeout)
	defer cancel()
	return client.LastEntry(ctx, &walpb.LastEntryRequest{LedgerId: id, StoreIncarnation: member.Incarnation})
}

// storeCallTimeout bounds one question to a store.
const storeCallTimeout = 5 * time.Second

// forgetCopies drops what it knows of ledgers no longer listed (deleted).
func (w *Worker) forgetCopies(ms []ledger.Metadata) {
	listed := make(map[uint64]bool, len(ms))
	for _, m := range ms {
		listed[m.ID] = true
	}
	for key := range w.full {
		if !listed[key.ledger] {
			delete(w.full, key)
		}
	}
}

// observe records when ensemble stores went unregistered and returns what
// plan needs.
func (w *Worker) observe(live []ledger.Member, ms []ledger.Metadata) liveness {
	l := liveness{registered: map[string]ledger.Member{}, goneSince: w.goneSince, now: w.cfg.Now(), grace: w.cfg.Grace}
	for _, m := range live {
		l.registered[m.StoreID] = m
		delete(w.goneSince, m.StoreID)
	}
	for _, m := range ms {
		for _, member := range m.Ensemble {
			if _, ok := l.registered[member.StoreID]; !ok {
				if _, seen := w.goneSince[member.StoreID]; !seen {
					w.goneSince[member.StoreID] = l.now
				}
			}
		}
	}
	return l
}

// rereplicate copies m onto targets and swaps its ensemble.
func (w *Worker) rereplicate(ctx context.Context, m ledger.Metadata, d decision, targets []ledger.Member, load map[string]int) error {
	// Partial members serve the entries they hold, after the full copies.
	sources := append(slices.Clip(d.sources), d.partial...)
	if len(sources) == 0 && m.LastEntry >= 0 {
		return fmt.Errorf("no registered store holds a copy (%d counted, %d lost)", len(d.keep), len(d.lost))
	}
	if len(targets) == 0 {
		return fmt.Errorf("no registered store to copy to (%d copies, %d intended)", len(d.keep), intendedW(m))
	}
	start := w.cfg.Now()
	var copied []ledger.Member
	var copyErrs []error
	for _, target := range targets {
		err := ledger.CopyClosed(ctx, m, sources, target, ledger.CopyOptions{Stores: w.cfg.Stores})
		if err != nil {
			copyErrs = append(copyErrs, err)
			continue
		}
		copied = append(copied, target)
	}
	if len(copied) == 0 {
		return errors.Join(copyErrs...)
	}
	next := nextEnsemble(m.Ensemble, d.keep, copied)
	if len(next) < m.A {
		return fmt.Errorf("only %d copies after copying, A=%d", len(next), m.A)
	}
	changed, err := ledger.ChangeEnsemble(ctx, w.cfg.Etcd, m, next)
	if err != nil {
		w.dropOrphans(ctx, m.ID, orphans(err, copied, m.Ensemble, changed.Ensemble))
		return err
	}
	for _, c := range copied {
		w.full[copyKey{ledger: m.ID, store: c.StoreID, incarnation: c.Incarnation}] = true
		load[c.StoreID]++
	}
	delete(w.failures, m.ID)
	w.report(changed, d, copied, w.cfg.Now().Sub(start))
	return errors.Join(copyErrs...)
}

// nextEnsemble is the ensemble after copying: the kept members and the
// members filled up in their places, then the new copies.
func nextEnsemble(ensemble, keep, copied []ledger.Member) []ledger.Member {
	var next []ledger.Member
	for _, member := range ensemble {
		if i := slices.IndexFunc(copied, func(c ledger.Member) bool { return c.StoreID == member.StoreID }); i >= 0 {
			next = append(next, copied[i])
		} else if memberOf(member.StoreID, keep) {
			next = append(next, member)
		}
	}
	for _, c := range copied {
		if !memberOf(c.StoreID, next) {
			next = append(next, c)
		}
	}
	return next
}

// orphans returns the copies to delete after ChangeEnsemble failed with
// err: none unless the change certainly did not happen (ErrEnsembleChanged,
// with current the ensemble that is, or ErrNotFound), and never one on a store of the
// ensemble before or now. A change whose answer was lost (a timeout, this
// worker deposed mid-call) may have happened: deleting its copies would
// leave members that hold nothing, and a store refuses a ledger it
// deleted for good, so no later pass could copy it there again. A copy
// left over only costs space.
func orphans(err error, copied, before, current []ledger.Member) []ledger.Member {
	if !errors.Is(err, ledger.ErrEnsembleChanged) && !errors.Is(err, ledger.ErrNotFound) {
		return nil // (the ledger deleted meanwhile: no ensemble names the copies)
	}
	var out []ledger.Member
	for _, c := range copied {
		if !memberOf(c.StoreID, before) && !memberOf(c.StoreID, current) {
			out = append(out, c)
		}
	}
	return out
}

// dropOrphans deletes ledger id's copies on stores.
func (w *Worker) dropOrphans(ctx context.Context, id uint64, stores []ledger.Member) {
	for _, c := range stores {
		if client, err := w.cfg.Stores.Client(c); err == nil {
			_, _ = client.DeleteLedger(ctx, &walpb.DeleteLedgerRequest{LedgerId: id})
		}
	}
}

func memberOf(storeID string, ensemble []ledger.Member) bool {
	for _, m := range ensemble {
		if m.StoreID == storeID {
			return true
		}
	}
	return false
}

// report tells the listener (event.Logging logs it: once, since the
// next pass finds the ledger complete).
func (w *Worker) report(m ledger.Metadata, d decision, copied []ledger.Member, took time.Duration) {
	w.cfg.Events.LedgerRereplicated(event.RereplicationInfo{Ledger: m.ID, Epoch: uint64(m.Epoch), Writer: m.WriterIncarnation,
		Last: m.LastEntry, Lost: storeIDs(d.lost), Added: storeIDs(copied), Copies: m.W, Intended: intendedW(m), Took: took})
}

func storeIDs(ms []ledger.Member) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.StoreID
	}
	return out
}

// noteFailure logs a ledger's failure when it differs from the last one
// logged for that ledger.
func (w *Worker) noteFailure(m ledger.Metadata, err error) {
	if text := err.Error(); w.failures[m.ID] != text {
		w.failures[m.ID] = text
		w.cfg.Logger.Warn("re-replication: ledger stays under-replicated", "ledger", m.ID, "writer", m.WriterIncarnation,
			"copies", len(m.Ensemble), "intended", intendedW(m), "err", err)
	}
}
