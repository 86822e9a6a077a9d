package ledger

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"orderlog/proto/walpb"
)

// Entry is one ledger entry as read back.
type Entry struct {
	ID      int64
	Span    Span
	Payload []byte
	// LAC is the writer's last add confirmed piggybacked on the entry, as
	// a store returned it (Reader sets it; re-replication copies it).
	LAC int64
}

// ReaderOptions tune a Reader.
type ReaderOptions struct {
	// Stores reaches the ensemble.
	Stores Dialer
	// CallTimeout bounds each store call. Default 1 s.
	CallTimeout time.Duration
	// Passes is how many times a read goes round the whole ensemble before
	// giving up (a reply can be lost, a store can be restarting). Default 3.
	Passes int
	// Retry is the pause between passes. Default 20 ms.
	Retry time.Duration
	// Silence is how long Scan waits for the next entry from one store
	// (with no error either) before it reads on from the next member of
	// the ensemble. A paused node keeps its connections open, so its
	// store's stream neither answers nor breaks. Default 300 ms: a takeover
	// reads its ledgers with a Scan, and moving on from a live store that
	// was merely slow costs one more stream.
	Silence time.Duration
	// Silent, if set, remembers the stores a scan found silent, across
	// readers: a scan starts with a member not in it, so reading many
	// ledgers off a paused store costs one Silence, not one per ledger.
	Silent *SilentStores
}

// SilentStores remembers, for a while, the stores a scan found silent.
// Safe for concurrent use.
type SilentStores struct {
	mu    sync.Mutex
	since map[string]time.Time
	// For is how long a store stays remembered. Default 10 s.
	For time.Duration
}

func (s *SilentStores) note(store string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.since == nil {
		s.since = make(map[string]time.Time)
	}
	s.since[store] = time.Now()
}

func (s *SilentStores) silent(store string) bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	at, ok := s.since[store]
	return ok && time.Since(at) < cmp.Or(s.For, 10*time.Second)
}

func (o *ReaderOptions) fillDefaults() {
	if o.CallTimeout <= 0 {
		o.CallTimeout = time.Second
	}
	if o.Passes <= 0 {
		o.Passes = 3
	}
	if o.Retry <= 0 {
		o.Retry = 20 * time.Millisecond
	}
	if o.Silence <= 0 {
		o.Silence = 300 * time.Millisecond
	}
}

// Reader reads entries of one ledger up to a bound known to be confirmed:
// the last entry of a closed ledger, or a LAC the caller learned. For each
// entry it tries the ensemble members in turn and moves to the next on
// UNKNOWN (new incarnation, checksum failure), ABSENT (a lagging store),
// an unreachable store or (Scan) a store silent for ReaderOptions.Silence.
// It never returns anything beyond its bound, and only entries a store
// answered PRESENT (checksum verified).
type Reader struct {
	meta    Metadata
	clients []walpb.WALClient
	bound   int64
	opts    ReaderOptions
}

// OpenReader reads the metadata of a closed ledger and returns a reader of
// its entries 0..LastEntry. A ledger not closed gives ErrNotClosed.
func OpenReader(ctx context.Context, cli *clientv3.Client, id uint64, o ReaderOptions) (*Reader, error) {
	m, err := Get(ctx, cli, id)
	if err != nil {
		return nil, err
	}
	if m.State != StateClosed {
		return nil, fmt.Errorf("ledger %d is %s: %w", id, m.State, ErrNotClosed)
	}
	return NewReader(m, m.LastEntry, o)
}

// NewReader returns a reader of entries 0..confirmed of the ledger m, for a
// caller that knows entries up to confirmed are confirmed (for example its
// own writer's LAC, or a LAC from the commit map).
func NewReader(m Metadata, confirmed int64, o ReaderOptions) (*Reader, error) {
	o.fillDefaults()
	if o.Stores == nil {
		return nil, fmt.Errorf("%w: no store dialer", ErrBadConfig)
	}
	clients, err := dialEnsemble(o.Stores, m.Ensemble)
	if err != nil {
		return nil, err
	}
	return &Reader{meta: m, clients: clients, bound: confirmed, opts: o}, nil
}

// Metadata is the ledger's metadata as the reader knows it.
func (r *Reader) Metadata() Metadata { return r.meta }

// Last is the last entry the reader serves (-1: none).
func (r *Reader) Last() int64 { return r.bound }

// Read returns one entry, trying the ensemble members in turn (starting
// at one chosen by the entry id, to spread load; members Silent names
// last), for up to Passes rounds. A member whose call times out is noted
// in Silent: a paused store costs one CallTimeout, not one per entry.
func (r *Reader) Read(ctx context.Context, id int64) (Entry, error) {
	if id < 0 || id > r.bound {
		return Entry{}, fmt.Errorf("ledger %d entry %d (last %d): %w", r.meta.ID, id, r.bound, ErrBeyondLast)
	}
	var causes []error
	for pass := range r.opts.Passes {
		if pass > 0 && r.pause(ctx) != nil {
			break
		}
		causes = causes[:0]
		for _, i := range r.readOrder(id) {
			e, err := r.readFrom(ctx, i, id)
			if err == nil {
				return e, nil
			}
			if status.Code(err) == codes.DeadlineExceeded && ctx.Err() == nil && r.opts.Silent != nil {
				r.opts.Silent.note(r.meta.Ensemble[i].StoreID)
			}
			causes = append(causes, err)
		}
	}
	if err := ctx.Err(); err != nil {
		causes = append(causes, err)
	}
	return Entry{}, fmt.Errorf("ledger %d entry %d: %w: %w", r.meta.ID, id, ErrUnreadable, errors.Join(causes...))
}

// readOrder is the order Read tries the members in for entry id.
func (r *Reader) readOrder(id int64) []int {
	order := make([]int, 0, len(r.clients))
	var silent []int
	for k := range r.clients {
		i := (int(id%int64(len(r.clients))) + k) % len(r.clients)
		if r.opts.Silent.silent(r.meta.Ensemble[i].StoreID) {
			silent = append(silent, i)
		} else {
			order = append(order, i)
		}
	}
	return append(order, silent...)
}

func (r *Reader) pause(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(r.opts.Retry):
		return nil
	}
}

func (r *Reader) readFrom(ctx context.Context, i int, id int64) (Entry, error) {
	ctx, cancel := context.WithTimeout(ctx, r.opts.CallTimeout)
	defer cancel()
	resp, err := r.clients[i].ReadEntry(ctx, &walpb.ReadEntryRequest{
		LedgerId: r.meta.ID, StoreIncarnation: r.meta.Ensemble[i].Incarnation, EntryId: id,
	})
	if err != nil {
		return Entry{}, fmt.Errorf("store %s: %w", r.meta.Ensemble[i].StoreID, err)
	}
	if resp.Status != walpb.EntryStatus_PRESENT || resp.EntryId != id {
		return Entry{}, fmt.Errorf("store %s: %s %s", r.meta.Ensemble[i].StoreID, resp.Status, resp.Message)
	}
	return Entry{ID: id, Span: spanOf(resp.Span), Payload: resp.Payload, LAC: resp.Lac}, nil
}

// Scan calls fn for entries first..last, each once and in order, streaming
// from one store and switching to the next member at the first entry it
// cannot serve: an answer other than PRESENT, a broken stream, or no entry
// for ReaderOptions.Silence. The next member's stream starts at the entry
// the scan has reached. Scan fails (ErrUnreadable) once every member, Passes
// times round, has failed without serving an entry; an error from fn ends
// the scan and is returned as it is.
func (r *Reader) Scan(ctx context.Context, first, last int64, fn func(Entry) error) error {
	if first < 0 || last > r.bound {
		return fmt.Errorf("ledger %d scan [%d, %d] (last %d): %w", r.meta.ID, first, last, r.bound, ErrBeyondLast)
	}
	next := first
	failures := 0
	start := 0
	for start < len(r.clients)-1 && r.opts.Silent.silent(r.meta.Ensemble[start].StoreID) {
		start++
	}
	for i := start; next <= last; i = (i + 1) % len(r.clients) {
		before := next
		err := r.scanFrom(ctx, i, &next, last, fn)
		if err == nil {
			continue
		}
		var stop *callbackError
		if errors.As(err, &stop) {
			return stop.err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if next > before {
			failures = 0
		}
		if failures++; failures >= len(r.clients)*r.opts.Passes {
			return fmt.Errorf("ledger %d entry %d: %w: %w", r.meta.ID, next, ErrUnreadable, err)
		}
		if failures%len(r.clients) == 0 && r.pause(ctx) != nil {
			return ctx.Err()
		}
	}
	return nil
}

// callbackError carries an error returned by the Scan callback.
type callbackError struct{ err error }

func (e *callbackError) Error() string { return e.err.Error() }

// silenceError is why a scan left a store that sent nothing for a while.
type silenceError struct {
	store   string
	entry   int64
	silence time.Duration
}

func (e *silenceError) Error() string {
	return fmt.Sprintf("store %s sent no entry %d for %v", e.store, e.entry, e.silence)
}

// errSilent is the cause of a stream cancelled for its silence.
var errSilent = errors.New("ledger: store silent")

// scanFrom streams entries *next..last from member i into fn, advancing
// *next past each entry fn took. The stream is cancelled when it has been
// silent for r.opts.Silence; the time fn takes does not count.
func (r *Reader) scanFrom(ctx context.Context, i int, next *int64, last int64, fn func(Entry) error) error {
	store := r.meta.Ensemble[i].StoreID
	streamCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	silent := time.AfterFunc(r.opts.Silence, func() { cancel(errSilent) })
	defer silent.Stop()
	streamErr := func(err error) error {
		if context.Cause(streamCtx) == errSilent {
			if r.opts.Silent != nil {
				r.opts.Silent.note(store)
			}
			return &silenceError{store: store, entry: *next, silence: r.opts.Silence}
		}
		return err
	}
	stream, err := r.clients[i].ReadEntries(streamCtx, &walpb.ReadEntriesRequest{
		LedgerId: r.meta.ID, StoreIncarnation: r.meta.Ensemble[i].Incarnation, FirstEntry: *next, LastEntry: last,
	})
	if err != nil {
		return streamErr(err)
	}
	for *next <= last {
		resp, err := stream.Recv()
		if err == io.EOF {
			return fmt.Errorf("store %s ended the stream at entry %d", store, *next)
		}
		if err != nil {
			return streamErr(err)
		}
		if resp.Status != walpb.EntryStatus_PRESENT || resp.EntryId != *next {
			return fmt.Errorf("store %s: entry %d: %s %s", store, *next, resp.Status, resp.Message)
		}
		if !silent.Stop() {
			// Fell silent just as the entry came: the next member serves it.
			return streamErr(errSilent)
		}
		if err := fn(Entry{ID: *next, Span: spanOf(resp.Span), Payload: resp.Payload, LAC: resp.Lac}); err != nil {
			return &callbackError{err}
		}
		*next++
		silent.Reset(r.opts.Silence)
	}
	return nil
}
