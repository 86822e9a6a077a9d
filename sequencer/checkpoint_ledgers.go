package sequencer

import (
	"context"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"orderlog/ingest/ledger"
	"orderlog/internal/keys"
	"orderlog/proto/walpb"
)

// CheckpointLog is a checkpoint ledger being written: entries appended in
// order, then sealed.
type CheckpointLog interface {
	ID() uint64
	// Append queues one entry and returns its id (dense from 0).
	Append(payload []byte) (int64, error)
	// Seal waits until every appended entry is confirmed, then closes the
	// ledger, and returns its last entry. Only a sealed checkpoint may be
	// pointed at.
	Seal(ctx context.Context) (int64, error)
	// Abandon stops the writer without waiting (after a failure); a later
	// leader closes what it left open like any older-epoch ledger.
	Abandon()
}

// CheckpointLedgers is what checkpoints need from ledgers, besides
// LedgerControl's commit-ledger reads.
type CheckpointLedgers interface {
	// CreateCheckpointLog creates a checkpoint ledger of epoch, compared
	// like a commit ledger's (seq/epoch and the election key).
	CreateCheckpointLog(ctx context.Context, epoch uint64, electionKey string) (CheckpointLog, error)
	// ReadEntries returns the payloads of entries [first, last] of a
	// closed ledger.
	ReadEntries(ctx context.Context, id uint64, first, last int64) ([][]byte, error)
	// DeleteLedger drops a closed ledger's copies from its stores and then
	// its metadata. A ledger already gone is not an error.
	DeleteLedger(ctx context.Context, id uint64) error
}

var _ CheckpointLedgers = (*LedgerClient)(nil)

// checkpointWriter remembers the last entry appended, which Seal waits
// for; one goroutine uses it.
type checkpointWriter struct {
	w    *ledger.Writer
	last int64
}

func (c *checkpointWriter) ID() uint64 { return c.w.ID() }
func (c *checkpointWriter) Append(p []byte) (int64, error) {
	id, err := c.w.Append(p, ledger.Span{})
	if err == nil {
		c.last = id
	}
	return id, err
}

// Seal implements CheckpointLog: a writer's Close freezes its LAC, so
// entries not confirmed by then would be cut off.
func (c *checkpointWriter) Seal(ctx context.Context) (int64, error) {
	if c.last >= 0 {
		if err := c.w.WaitConfirmed(ctx, c.last); err != nil {
			return -1, err
		}
	}
	m, err := c.w.Close(ctx)
	if err != nil {
		return -1, err
	}
	if m.LastEntry != c.last {
		return -1, fmt.Errorf("checkpoint ledger %d closed at entry %d, not %d", c.w.ID(), m.LastEntry, c.last)
	}
	return m.LastEntry, nil
}

func (c *checkpointWriter) Abandon() { stopLedgerWriter(c.w) }

// stopLedgerWriter ends a writer's goroutines without recording anything:
// Close with a context that is already done stops its loops, then fails
// before it reaches etcd.
func stopLedgerWriter(w *ledger.Writer) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, _ = w.Close(ctx)
}

// CreateCheckpointLog implements CheckpointLedgers.
func (lc *LedgerClient) CreateCheckpointLog(ctx context.Context, epoch uint64, electionKey string) (CheckpointLog, error) {
	ensemble, err := lc.Replication.ensemble(ctx)
	if err != nil {
		return nil, fmt.Errorf("choose the checkpoint ledger's stores: %w", err)
	}
	w, err := ledger.Create(ctx, lc.Etcd, ledger.CreateOptions{
		Epoch: int64(epoch), WriterIncarnation: lc.writer() + "-checkpoint", WriterKey: electionKey, Kind: ledger.KindCheckpoint,
		Ensemble: ensemble, W: lc.Replication.W, AckQuorum: lc.Replication.AckQuorum, Tolerate: lc.Replication.Tolerate,
		Stores: lc.Stores, Writer: ledger.WriterOptions{Events: lc.Events},
	})
	if err != nil {
		return nil, fmt.Errorf("create checkpoint ledger: %w", err)
	}
	return &checkpointWriter{w: w, last: -1}, nil
}

func (lc *LedgerClient) writer() string {
	if lc.Writer == "" {
		return "sequencer"
	}
	return lc.Writer
}

// ReadEntries implements CheckpointLedgers.
func (lc *LedgerClient) ReadEntries(ctx context.Context, id uint64, first, last int64) ([][]byte, error) {
	m, err := ledger.Get(ctx, lc.Etcd, id)
	if err != nil {
		return nil, err
	}
	if m.State != ledger.StateClosed {
		return nil, fmt.Errorf("ledger %d is %s: %w", id, m.State, ErrLedgerNotClosed)
	}
	if last > m.LastEntry || first < 0 {
		return nil, fmt.Errorf("ledger %d has entries [0, %d], not [%d, %d]", id, m.LastEntry, first, last)
	}
	r, err := ledger.NewReader(m, m.LastEntry, ledger.ReaderOptions{Stores: lc.Stores, Silent: &lc.silent})
	if err != nil {
		return nil, err
	}
	var out [][]byte
	err = r.Scan(ctx, first, last, func(e ledger.Entry) error { out = append(out, e.Payload); return nil })
	return out, err
}

// DeleteLedger implements CheckpointLedgers. The stores' copies go first:
// metadata deleted first would leave copies no one knows of.
func (lc *LedgerClient) DeleteLedger(ctx context.Context, id uint64) error {
	m, err := ledger.Get(ctx, lc.Etcd, id)
	if errors.Is(err, ledger.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if m.State != ledger.StateClosed {
		return fmt.Errorf("delete ledger %d: it is %s: %w", id, m.State, ErrLedgerNotClosed)
	}
	for _, member := range m.Ensemble {
		client, err := lc.Stores.Client(member)
		if err != nil {
			return fmt.Errorf("delete ledger %d: %w", id, err)
		}
		if _, err := client.DeleteLedger(ctx, &walpb.DeleteLedgerRequest{LedgerId: id}); err != nil {
			return fmt.Errorf("delete ledger %d on store %s: %w", id, member.StoreID, err)
		}
	}
	resp, err := lc.Etcd.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(keys.Ledger(id)), "=", m.ModRevision)).
		Then(clientv3.OpDelete(keys.Ledger(id))).Commit()
	if err != nil {
		return fmt.Errorf("delete ledger %d metadata: %w", id, err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("delete ledger %d metadata: it changed", id)
	}
	return nil
}
