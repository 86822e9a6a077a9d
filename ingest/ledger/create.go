package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	events "orderlog/internal/event"
	"orderlog/internal/keys"
	"orderlog/proto/walpb"
)

// Span is the global offset range [First, End) an entry carries. An empty
// span (End <= First) carries no offsets (the commit ledger's entries).
type Span struct {
	First uint64
	End   uint64
}

// Empty reports whether the span covers no offset.
func (s Span) Empty() bool { return s.End <= s.First }

func (s Span) proto() *walpb.Span { return &walpb.Span{First: s.First, End: s.End} }

func spanOf(p *walpb.Span) Span {
	if p == nil {
		return Span{}
	}
	return Span{First: p.First, End: p.End}
}

// CreateOptions describe a new ledger.
type CreateOptions struct {
	// Epoch is the sequencer epoch the ledger belongs to; creation fails with
	// ErrStaleEpoch unless keys.SeqEpoch holds exactly this value.
	Epoch int64
	// WriterIncarnation names the writer (an ingest incarnation).
	WriterIncarnation string
	// WriterKey is the liveness key compared at creation; empty means
	// keys.Ingest(WriterIncarnation). The sequencer passes its election key.
	WriterKey string
	// Kind says what the ledger holds (Metadata.Kind).
	Kind Kind
	// Ensemble lists the stores, with the incarnations to write to: W of
	// them, or fewer (at least A) when fewer are live — a degraded ledger,
	// whose every ack is still on A fsynced copies and which re-replication
	// brings to W copies once it is closed.
	Ensemble []Member
	// W is the ensemble size the ledger is meant to have (the configured
	// write quorum), recorded as the metadata's IntendedW. Zero means
	// len(Ensemble), raised to 2f+1 — the least W that tolerates f store
	// failures — when the ensemble is smaller than that.
	W int
	// AckQuorum is A.
	AckQuorum int
	// Tolerate is f, the store failures to survive (validated against W, A).
	Tolerate int
	// Stores reaches the ensemble.
	Stores Dialer
	// Writer tunes the writer.
	Writer WriterOptions
}

// WriterOptions tune a Writer. Zero values take the defaults.
type WriterOptions struct {
	// MaxInFlight bounds the entries appended but not yet confirmed; Append
	// blocks beyond it. Default 8192.
	MaxInFlight int
	// MaxRetained bounds the entries kept for stores that lag behind the LAC;
	// a store lagging further is dropped from the ledger (it then counts
	// against the quorum). Default 4 × MaxInFlight.
	MaxRetained int
	// MaxFrameEntries and MaxFrameBytes bound one AddEntries frame.
	// Defaults 256 and 1 MiB.
	MaxFrameEntries int
	MaxFrameBytes   int
	// UnreachableAfter is how long a store may leave entries unacked before
	// it counts as unreachable; when more than W−A stores are unreachable or
	// failed the writer fails with ErrQuorumLost. Default 2 s.
	UnreachableAfter time.Duration
	// OnConfirm, if set, is called with the new LAC after it advanced
	// (several advances may be reported as one: every entry ≤ lac is
	// confirmed), with increasing values, never concurrently, from the
	// writer's own goroutine — except that Close reports the last advance
	// before the freeze from the goroutine calling Close, before it returns.
	// It must not block long (nor wait for the goroutine that calls Close).
	OnConfirm func(lac int64)
	// LocalStore names the ensemble member on the writer's own node ("" if
	// none). With OnLocalDurable set, that store's progress is reported too.
	LocalStore string
	// OnLocalDurable, if set, is called with the highest entry that
	// LocalStore acked (fsynced; it holds every entry up to it), with
	// increasing values, never concurrently with itself or OnConfirm, from
	// the writer's goroutine. It says nothing about the ack quorum: an entry
	// reported here can still be cut off by a close at a lower LAC. Nothing is
	// reported once Close began.
	OnLocalDurable func(entry int64)
	// ReleasePayload, if set, is handed each appended payload once every
	// ensemble member acked its entry, so the caller can reuse the buffer:
	// no store needs it any more and the writer keeps no reference. Payloads
	// of entries some member never acked (a dropped store, a close) are
	// never handed back. Called with the writer's lock held: it must only
	// store the buffer.
	ReleasePayload func(payload []byte)
	// Events is told when the writer fails (quorum lost, fenced).
	Events events.Listener
}

func (o *WriterOptions) fillDefaults() {
	if o.MaxInFlight <= 0 {
		o.MaxInFlight = 8192
	}
	if o.MaxRetained <= 0 {
		o.MaxRetained = 4 * o.MaxInFlight
	}
	if o.MaxFrameEntries <= 0 {
		o.MaxFrameEntries = 256
	}
	if o.MaxFrameBytes <= 0 {
		o.MaxFrameBytes = 1 << 20
	}
	if o.UnreachableAfter <= 0 {
		o.UnreachableAfter = 2 * time.Second
	}
}

// intendedW is the W the ledger is meant to have (see CreateOptions.W).
func (o CreateOptions) intendedW() int {
	if o.W > 0 {
		return o.W
	}
	return max(len(o.Ensemble), 2*o.Tolerate+1)
}

func (o CreateOptions) validate() error {
	r := Replication{W: o.intendedW(), A: o.AckQuorum, Tolerate: o.Tolerate}
	if err := r.Validate(); err != nil {
		return err
	}
	switch {
	case len(o.Ensemble) < o.AckQuorum:
		return fmt.Errorf("%w: %d live stores, A=%d (W=%d)", ErrTooFewStores, len(o.Ensemble), o.AckQuorum, r.W)
	case len(o.Ensemble) > r.W:
		return fmt.Errorf("%w: ensemble of %d stores, W=%d", ErrBadConfig, len(o.Ensemble), r.W)
	case len(o.Ensemble) > 64:
		return fmt.Errorf("%w: ensemble of %d stores (at most 64)", ErrBadConfig, len(o.Ensemble))
	case o.WriterIncarnation == "":
		return fmt.Errorf("%w: writer incarnation missing", ErrBadConfig)
	case o.Stores == nil:
		return fmt.Errorf("%w: no store dialer", ErrBadConfig)
	}
	seen := make(map[string]bool)
	for _, m := range o.Ensemble {
		if seen[m.StoreID] {
			return fmt.Errorf("%w: store %s twice in the ensemble", ErrBadConfig, m.StoreID)
		}
		seen[m.StoreID] = true
	}
	return nil
}

// Create writes the metadata of a new open ledger (one etcd transaction
// that allocates the id and compares the epoch and the writer's liveness
// key) and returns its writer. With fewer than A stores in the ensemble it
// fails with ErrTooFewStores.
func Create(ctx context.Context, cli *clientv3.Client, o CreateOptions) (*Writer, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	writerKey := o.WriterKey
	if writerKey == "" {
		writerKey = keys.Ingest(o.WriterIncarnation)
	}
	clients, err := dialEnsemble(o.Stores, o.Ensemble)
	if err != nil {
		return nil, err
	}
	m := Metadata{
		WriterIncarnation: o.WriterIncarnation,
		Epoch:             o.Epoch,
		Ensemble:          append([]Member(nil), o.Ensemble...),
		W:                 len(o.Ensemble),
		IntendedW:         o.intendedW(),
		A:                 o.AckQuorum,
		State:             StateOpen,
		LastEntry:         -1,
		Kind:              o.Kind,
	}
	m, err = createRecord(ctx, cli, m, writerKey)
	if err != nil {
		if errors.Is(err, ErrStaleEpoch) || errors.Is(err, ErrWriterGone) {
			return nil, err
		}
		return nil, fmt.Errorf("create ledger: %w", err)
	}
	o.Writer.fillDefaults()
	return startWriter(cli, m, clients, o.Writer), nil
}
