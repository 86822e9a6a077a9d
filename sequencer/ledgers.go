package sequencer

import (
	"context"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"orderlog/ingest/ledger"
	"orderlog/internal/event"
)

// CommitLog is the leader's commit ledger as the sequencer needs it:
// entries appended in order, confirmations reported in order.
type CommitLog interface {
	// ID is the commit ledger's id.
	ID() uint64
	// Append queues one entry and returns its id (dense from 0). An error
	// means the commit ledger can take no more entries (fenced: a newer
	// leader recovered it; or quorum lost).
	Append(payload []byte) (int64, error)
	// Close stops appending; entries already confirmed stay.
	Close(ctx context.Context) error
	// Err is the error that stopped the commit ledger (fenced, quorum
	// lost), nil while it takes entries. It can be set with no Append to
	// report it: while an entry waits to be confirmed, none is appended.
	Err() error
	// LostMember is why a member of the ensemble dropped out for good,
	// or nil: the leader then rolls to a new commit ledger.
	LostMember() error
	// IntendedW is the ensemble size the ledger was meant to have, when it
	// was created on fewer stores (degraded); 0 when it was not.
	IntendedW() int
}

// LedgerControl is what the sequencer needs from ledgers (DESIGN §4 through
// the ledger client): create its commit ledger, recover ledgers, read the
// spans of a closed ledger's entries, and list older-epoch ledgers.
type LedgerControl interface {
	// CreateCommitLog creates the commit ledger of epoch, whose creation
	// compares seq/epoch and the leader's election key. onConfirm is called
	// with every LAC advance, in order.
	CreateCommitLog(ctx context.Context, epoch uint64, electionKey string, onConfirm func(lac int64)) (CommitLog, error)
	// ReadCommitLog fences and recovers commit ledger id if it is not
	// closed, and returns the payloads of its entries ≤ last.
	ReadCommitLog(ctx context.Context, id uint64) ([][]byte, error)
	// ReadClosedCommitLog returns the payloads of a closed commit
	// ledger's entries ≤ last, or ErrLedgerNotClosed: it never fences.
	ReadClosedCommitLog(ctx context.Context, id uint64) ([][]byte, error)
	// Recover closes ledger id (fence and recover it if it is not closed)
	// and returns the spans of its entries ≤ last.
	Recover(ctx context.Context, id uint64) ([]EntrySpan, error)
	// ClosedSpans returns the spans of a closed ledger's entries ≤ last,
	// or ErrLedgerNotClosed.
	ClosedSpans(ctx context.Context, id uint64) ([]EntrySpan, error)
	// Lookup returns a ledger's writer and epoch, and whether it is open.
	Lookup(ctx context.Context, id uint64) (ref LedgerRef, open bool, err error)
	// Weakness says, from the store registrations, why commit ledger c
	// should be rolled ("" if it need not): it is degraded and enough
	// stores are registered for a full ensemble, or a member is lost for
	// good (ledger.LostMembers).
	Weakness(ctx context.Context, c CommitLog) (string, error)
	// Older lists every ledger of epoch < epoch that is not closed, and the
	// ids of closed ones whose offset range reaches c0. The commit ledgers
	// named in commitLedgers (recovered and replayed in step 2) are left out.
	Older(ctx context.Context, epoch, c0 uint64, commitLedgers []uint64) (unclosed []UnclosedLedger, closed []uint64, err error)
}

// ErrLedgerNotClosed is returned by LedgerControl.ClosedSpans for a ledger
// that is open or recovering.
var ErrLedgerNotClosed = errors.New("sequencer: ledger not closed")

// CommitReplication places the commit ledger.
type CommitReplication struct {
	// Choose, if set, picks the ensemble of each new commit ledger from the
	// stores live at that moment (up to W of them; fewer, down to
	// AckQuorum, makes a degraded ledger). Nil: Ensemble, fixed.
	Choose func(ctx context.Context) ([]ledger.Member, error)
	// Ensemble is the fixed ensemble used when Choose is nil.
	Ensemble []ledger.Member
	// W is the intended ensemble size recorded in the ledger's metadata;
	// zero: len(Ensemble) (see ledger.CreateOptions.W).
	W         int
	AckQuorum int
	Tolerate  int
}

// ensemble is the ensemble of the next commit ledger.
func (r CommitReplication) ensemble(ctx context.Context) ([]ledger.Member, error) {
	if r.Choose == nil {
		return r.Ensemble, nil
	}
	return r.Choose(ctx)
}

// LedgerClient implements LedgerControl over the ledger client
// (orderlog/ingest/ledger) and etcd.
type LedgerClient struct {
	Etcd        *clientv3.Client
	Stores      ledger.Dialer
	Replication CommitReplication
	// Writer names the commit ledger's writer in its metadata; default
	// "sequencer". Commit ledgers are told apart by the list at
	// keys.SeqCommitLedgers, not by this name.
	Writer string
	// Events is told of the commit ledger's failure and of recoveries.
	Events event.Listener
	// silent remembers the stores found silent while reading ledgers: a
	// new leader replays every listed commit ledger, and a paused store
	// first in their ensembles cost it one silence timeout each.
	silent ledger.SilentStores
}

var _ LedgerControl = (*LedgerClient)(nil)

type commitWriter struct{ w *ledger.Writer }

func (c commitWriter) ID() uint64 { return c.w.ID() }
func (c commitWriter) Append(p []byte) (int64, error) {
	return c.w.Append(p, ledger.Span{})
}
func (c commitWriter) Err() error        { return c.w.Err() }
func (c commitWriter) LostMember() error { return c.w.LostMember() }
func (c commitWriter) IntendedW() int {
	if m := c.w.Metadata(); m.Degraded() {
		return m.IntendedW
	}
	return 0
}
func (c commitWriter) Close(ctx context.Context) error {
	_, err := c.w.Close(ctx)
	return err
}

// CreateCommitLog implements LedgerControl.
func (lc *LedgerClient) CreateCommitLog(ctx context.Context, epoch uint64, electionKey string, onConfirm func(int64)) (CommitLog, error) {
	writer := lc.Writer
	if writer == "" {
		writer = "sequencer"
	}
	ensemble, err := lc.Replication.ensemble(ctx)
	if err != nil {
		return nil, fmt.Errorf("choose the commit ledger's stores: %w", err)
	}
	w, err := ledger.Create(ctx, lc.Etcd, ledger.CreateOptions{
		Epoch: int64(epoch), WriterIncarnation: writer, WriterKey: electionKey,
		Ensemble: ensemble, W: lc.Replication.W, AckQuorum: lc.Replication.AckQuorum, Tolerate: lc.Replication.Tolerate,
		Stores: lc.Stores, Writer: ledger.WriterOptions{OnConfirm: onConfirm, Events: lc.Events},
	})
	if err != nil {
		return nil, fmt.Errorf("create commit ledger: %w", err)
	}
	return commitWriter{w}, nil
}

// Weakness implements LedgerControl.
func (lc *LedgerClient) Weakness(ctx context.Context, c CommitLog) (string, error) {
	cw, ok := c.(commitWriter)
	if !ok {
		return "", nil
	}
	live, err := ledger.LiveStores(ctx, lc.Etcd)
	if err != nil {
		return "", err
	}
	if why := ledger.Weakness(cw.w.Metadata(), live); why != "" {
		return "commit ledger " + why, nil
	}
	return "", nil
}

// ReadCommitLog implements LedgerControl.
func (lc *LedgerClient) ReadCommitLog(ctx context.Context, id uint64) ([][]byte, error) {
	var out [][]byte
	err := lc.scanClosed(ctx, id, true, true, func(e ledger.Entry) { out = append(out, e.Payload) })
	return out, err
}

// ReadClosedCommitLog implements LedgerControl.
func (lc *LedgerClient) ReadClosedCommitLog(ctx context.Context, id uint64) ([][]byte, error) {
	var out [][]byte
	err := lc.scanClosed(ctx, id, false, true, func(e ledger.Entry) { out = append(out, e.Payload) })
	return out, err
}

// Recover implements LedgerControl.
func (lc *LedgerClient) Recover(ctx context.Context, id uint64) ([]EntrySpan, error) {
	return lc.spans(ctx, id, true)
}

// ClosedSpans implements LedgerControl.
func (lc *LedgerClient) ClosedSpans(ctx context.Context, id uint64) ([]EntrySpan, error) {
	return lc.spans(ctx, id, false)
}

func (lc *LedgerClient) spans(ctx context.Context, id uint64, recover bool) ([]EntrySpan, error) {
	var out []EntrySpan
	err := lc.scanClosed(ctx, id, recover, false, func(e ledger.Entry) {
		if !e.Span.Empty() {
			out = append(out, EntrySpan{Entry: e.ID, Range: Range{e.Span.First, e.Span.End}})
		}
	})
	return out, err
}

// scanClosed reads every entry ≤ last of a closed ledger, recovering it
// first if asked; noOffsets marks a commit ledger, whose entries carry no
// offsets (its recovery then skips the offset hull, which read back every
// entry: a failover took longer the longer the old leader's log was).
func (lc *LedgerClient) scanClosed(ctx context.Context, id uint64, recover, noOffsets bool, fn func(ledger.Entry)) error {
	m, err := ledger.Get(ctx, lc.Etcd, id)
	if err != nil {
		return err
	}
	if m.State != ledger.StateClosed {
		if !recover {
			return fmt.Errorf("ledger %d is %s: %w", id, m.State, ErrLedgerNotClosed)
		}
		if m, err = ledger.Recover(ctx, lc.Etcd, id, ledger.RecoverOptions{Stores: lc.Stores, NoOffsets: noOffsets, Events: lc.Events}); err != nil {
			return fmt.Errorf("recover ledger %d: %w", id, err)
		}
	}
	if m.LastEntry < 0 {
		return nil
	}
	r, err := ledger.NewReader(m, m.LastEntry, ledger.ReaderOptions{Stores: lc.Stores, Silent: &lc.silent})
	if err != nil {
		return err
	}
	return r.Scan(ctx, 0, m.LastEntry, func(e ledger.Entry) error { fn(e); return nil })
}

// Lookup implements LedgerControl.
func (lc *LedgerClient) Lookup(ctx context.Context, id uint64) (LedgerRef, bool, error) {
	m, err := ledger.Get(ctx, lc.Etcd, id)
	if err != nil {
		return LedgerRef{}, false, err
	}
	return LedgerRef{ID: m.ID, Writer: m.WriterIncarnation, Epoch: uint64(m.Epoch)}, m.State == ledger.StateOpen, nil
}

// Older implements LedgerControl.
func (lc *LedgerClient) Older(ctx context.Context, epoch, c0 uint64, commitLedgers []uint64) ([]UnclosedLedger, []uint64, error) {
	ms, err := ledger.List(ctx, lc.Etcd, ledger.Filter{EpochBelow: int64(epoch)})
	if err != nil {
		return nil, nil, err
	}
	skip := make(map[uint64]bool, len(commitLedgers))
	for _, id := range commitLedgers {
		skip[id] = true
	}
	var unclosed []UnclosedLedger
	var closed []uint64
	for _, m := range ms {
		// A commit ledger of a leader that died before recording it is not
		// skipped: it is closed like any other (it has no offsets). A
		// retained-set ledger is: every offset it holds lies below the log
		// start, which never passes C, so below C₀ (retention closes its
		// own abandoned ones).
		if skip[m.ID] || m.Kind == ledger.KindRetained {
			continue
		}
		switch m.State {
		case ledger.StateClosed:
			if m.HasOffsets() && m.EndOffset > c0 {
				closed = append(closed, m.ID)
			}
		default:
			unclosed = append(unclosed, UnclosedLedger{
				LedgerRef:  LedgerRef{ID: m.ID, Writer: m.WriterIncarnation, Epoch: uint64(m.Epoch)},
				Recovering: m.State == ledger.StateRecovering,
			})
		}
	}
	return unclosed, closed, nil
}
