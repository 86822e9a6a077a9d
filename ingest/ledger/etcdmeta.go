package ledger

import (
	"context"
	"fmt"
	"strconv"

	clientv3 "go.etcd.io/etcd/client/v3"

	"orderlog/internal/keys"
)

// This file is the thin etcd layer: every ledger state change is a
// compare-and-swap on the record's ModRevision, so a change decided on a
// stale read is never applied.

// createRecord allocates the next ledger id and writes m (state open) in
// one transaction that also compares the sequencer epoch and the writer's
// liveness key.
func createRecord(ctx context.Context, cli *clientv3.Client, m Metadata, writerKey string) (Metadata, error) {
	epochValue := strconv.FormatInt(m.Epoch, 10)
	for {
		counter, err := cli.Get(ctx, keys.LedgerIDCounter)
		if err != nil {
			return Metadata{}, fmt.Errorf("read ledger id counter: %w", err)
		}
		var lastID uint64
		var counterRev int64
		if len(counter.Kvs) == 1 {
			counterRev = counter.Kvs[0].ModRevision
			if lastID, err = strconv.ParseUint(string(counter.Kvs[0].Value), 10, 64); err != nil {
				return Metadata{}, fmt.Errorf("parse ledger id counter: %w", err)
			}
		}
		m.ID = lastID + 1
		value, err := encodeMetadata(m)
		if err != nil {
			return Metadata{}, err
		}
		resp, err := cli.Txn(ctx).If(
			clientv3.Compare(clientv3.Value(keys.SeqEpoch), "=", epochValue),
			clientv3.Compare(clientv3.CreateRevision(writerKey), ">", 0),
			clientv3.Compare(clientv3.ModRevision(keys.LedgerIDCounter), "=", counterRev),
			clientv3.Compare(clientv3.CreateRevision(keys.Ledger(m.ID)), "=", 0),
		).Then(
			clientv3.OpPut(keys.LedgerIDCounter, strconv.FormatUint(m.ID, 10)),
			clientv3.OpPut(keys.Ledger(m.ID), string(value)),
		).Else(
			clientv3.OpGet(keys.SeqEpoch),
			clientv3.OpGet(writerKey),
		).Commit()
		if err != nil {
			return Metadata{}, fmt.Errorf("create ledger txn: %w", err)
		}
		if resp.Succeeded {
			m = m.withVersion()
			m.ModRevision = resp.Header.Revision
			return m, nil
		}
		epochKV := resp.Responses[0].GetResponseRange().Kvs
		if len(epochKV) != 1 || string(epochKV[0].Value) != epochValue {
			return Metadata{}, ErrStaleEpoch
		}
		if len(resp.Responses[1].GetResponseRange().Kvs) == 0 {
			return Metadata{}, ErrWriterGone
		}
		// Another creator took the id: read the counter again.
	}
}

// Get reads the metadata of one ledger.
func Get(ctx context.Context, cli *clientv3.Client, id uint64) (Metadata, error) {
	resp, err := cli.Get(ctx, keys.Ledger(id))
	if err != nil {
		return Metadata{}, fmt.Errorf("read ledger %d: %w", id, err)
	}
	if len(resp.Kvs) == 0 {
		return Metadata{}, ErrNotFound
	}
	return decodeMetadata(resp.Kvs[0].Value, resp.Kvs[0].ModRevision)
}

// casRecord replaces cur by next if the record has not changed since cur
// was read. It returns the record as it is afterwards and whether the swap
// happened.
func casRecord(ctx context.Context, cli *clientv3.Client, cur, next Metadata) (Metadata, bool, error) {
	value, err := encodeMetadata(next)
	if err != nil {
		return Metadata{}, false, err
	}
	key := keys.Ledger(cur.ID)
	resp, err := cli.Txn(ctx).If(
		clientv3.Compare(clientv3.ModRevision(key), "=", cur.ModRevision),
	).Then(
		clientv3.OpPut(key, string(value)),
	).Else(
		clientv3.OpGet(key),
	).Commit()
	if err != nil {
		return Metadata{}, false, fmt.Errorf("ledger %d state change: %w", cur.ID, err)
	}
	if resp.Succeeded {
		next = next.withVersion()
		next.ModRevision = resp.Header.Revision
		return next, true, nil
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 {
		return Metadata{}, false, ErrNotFound
	}
	now, err := decodeMetadata(kvs[0].Value, kvs[0].ModRevision)
	return now, false, err
}

// transition moves the ledger from state from to state to by CAS, retrying
// while the record changes without leaving from. It returns the record after
// the attempt; swapped is false if the ledger was no longer in from.
func transition(ctx context.Context, cli *clientv3.Client, cur Metadata, from State, build func(Metadata) Metadata) (Metadata, bool, error) {
	for cur.State == from {
		next, swapped, err := casRecord(ctx, cli, cur, build(cur))
		if err != nil || swapped {
			return next, swapped, err
		}
		cur = next
	}
	return cur, false, nil
}

// Filter selects ledgers in List. A nil field accepts everything.
type Filter struct {
	// States, if non-empty, accepts only these states.
	States []State
	// EpochBelow, if non-zero, accepts only ledgers with Epoch < EpochBelow.
	EpochBelow int64
	// Writer, if non-empty, accepts only ledgers of this writer incarnation.
	Writer string
}

func (f Filter) accepts(m Metadata) bool {
	if f.EpochBelow != 0 && m.Epoch >= f.EpochBelow {
		return false
	}
	if f.Writer != "" && m.WriterIncarnation != f.Writer {
		return false
	}
	if len(f.States) == 0 {
		return true
	}
	for _, s := range f.States {
		if m.State == s {
			return true
		}
	}
	return false
}

// List returns the ledgers accepted by f, in id order. It reads the
// ledger prefix in pages so a large number of ledgers never makes one huge
// etcd response.
func List(ctx context.Context, cli *clientv3.Client, f Filter) ([]Metadata, error) {
	const page = 500
	var out []Metadata
	from := keys.LedgersPrefix
	end := clientv3.GetPrefixRangeEnd(keys.LedgersPrefix)
	for {
		resp, err := cli.Get(ctx, from, clientv3.WithRange(end), clientv3.WithLimit(page))
		if err != nil {
			return nil, fmt.Errorf("list ledgers: %w", err)
		}
		for _, kv := range resp.Kvs {
			m, err := decodeMetadata(kv.Value, kv.ModRevision)
			if err != nil {
				return nil, fmt.Errorf("list ledgers: %s: %w", kv.Key, err)
			}
			if f.accepts(m) {
				out = append(out, m)
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return out, nil
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// waitClosed blocks until the ledger is closed and returns its final
// metadata. It reads first, then watches from the revision after the read,
// so a close between the two is not missed.
func waitClosed(ctx context.Context, cli *clientv3.Client, id uint64) (Metadata, error) {
	for {
		resp, err := cli.Get(ctx, keys.Ledger(id))
		if err != nil {
			return Metadata{}, fmt.Errorf("read ledger %d: %w", id, err)
		}
		if len(resp.Kvs) == 0 {
			return Metadata{}, ErrNotFound
		}
		m, err := decodeMetadata(resp.Kvs[0].Value, resp.Kvs[0].ModRevision)
		if err != nil || m.State == StateClosed {
			return m, err
		}
		wctx, cancel := context.WithCancel(ctx)
		ch := cli.Watch(wctx, keys.Ledger(id), clientv3.WithRev(resp.Header.Revision+1))
		for wr := range ch {
			if wr.Err() != nil || len(wr.Events) > 0 {
				break
			}
		}
		cancel()
		if err := ctx.Err(); err != nil {
			return Metadata{}, err
		}
	}
}
