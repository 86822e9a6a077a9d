package retention

import (
	"context"
	"fmt"
	"strconv"

	clientv3 "go.etcd.io/etcd/client/v3"

	"orderlog/ingest/batch"
	"orderlog/ingest/ledger"
	"orderlog/internal/keys"
)

// Retained ledgers: at most retainedEntries batches of at most
// retainedBatchRecords records each, so that a ledger's index entry stays
// small (a few hundred KiB) and one read serves a page.
const (
	retainedEntries      = 16384
	retainedBatchRecords = 1024
)

// LedgerMaker creates the retained set's ledgers: the ensemble and
// replication the node's own ledgers use.
type LedgerMaker struct {
	Etcd   *clientv3.Client
	Stores ledger.Dialer
	// Ensemble picks a new ledger's stores.
	Ensemble func(ctx context.Context) ([]ledger.Member, error)
	// W, AckQuorum, Tolerate as the ingest ledgers'.
	W, AckQuorum, Tolerate int
}

// writeRetained writes kept into new closed ledgers and returns them, in
// offset order. writer names them (ledger metadata), writerKey is the
// etcd key whose existence creating them compares (the worker's
// election key: a deposed worker creates none).
func writeRetained(ctx context.Context, mk LedgerMaker, kept []Kept, writer, writerKey string) ([]RetainedLedger, error) {
	batches := Batches(kept, retainedBatchRecords)
	var out []RetainedLedger
	for start := 0; start < len(batches); start += retainedEntries {
		l, err := writeRetainedLedger(ctx, mk, batches[start:min(start+retainedEntries, len(batches))], writer, writerKey)
		if err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, nil
}

func writeRetainedLedger(ctx context.Context, mk LedgerMaker, batches []KeptBatch, writer, writerKey string) (RetainedLedger, error) {
	epoch, err := currentEpoch(ctx, mk.Etcd)
	if err != nil {
		return RetainedLedger{}, err
	}
	ensemble, err := mk.Ensemble(ctx)
	if err != nil {
		return RetainedLedger{}, fmt.Errorf("choose a retained ledger's stores: %w", err)
	}
	w, err := ledger.Create(ctx, mk.Etcd, ledger.CreateOptions{Epoch: epoch, WriterIncarnation: writer, WriterKey: writerKey, Kind: ledger.KindRetained,
		Ensemble: ensemble, W: mk.W, AckQuorum: mk.AckQuorum, Tolerate: mk.Tolerate, Stores: mk.Stores})
	if err != nil {
		return RetainedLedger{}, fmt.Errorf("create a retained ledger: %w", err)
	}
	l, err := appendRetained(ctx, w, batches)
	if err != nil {
		_, _ = w.Close(ctx) // closed below what it holds: it covers no offset the set names
		return RetainedLedger{}, err
	}
	return l, nil
}

// appendRetained appends the batches and the index, waits until all are
// confirmed and closes the ledger.
func appendRetained(ctx context.Context, w *ledger.Writer, batches []KeptBatch) (RetainedLedger, error) {
	spans := make([]IndexSpan, 0, len(batches))
	for _, b := range batches {
		payload, err := batch.Encode(nil, b.Header, b.Records)
		if err != nil {
			return RetainedLedger{}, err
		}
		if _, err := w.AppendCounted(payload, ledger.Span{First: b.Header.FirstOffset, End: b.Header.EndOffset()}, b.topicBytes()); err != nil {
			return RetainedLedger{}, err
		}
		spans = append(spans, IndexSpan{First: b.Header.FirstOffset, End: b.Header.EndOffset()})
	}
	last, err := w.Append(EncodeIndex(spans), ledger.Span{})
	if err == nil {
		err = w.WaitConfirmed(ctx, last)
	}
	if err != nil {
		return RetainedLedger{}, err
	}
	meta, err := w.Close(ctx)
	if err != nil {
		return RetainedLedger{}, err
	}
	if meta.LastEntry != last {
		return RetainedLedger{}, fmt.Errorf("retained ledger %d closed at entry %d, wrote %d", meta.ID, meta.LastEntry, last)
	}
	return RetainedLedger{ID: meta.ID, First: meta.FirstOffset, End: meta.EndOffset, Entries: last}, nil
}

func currentEpoch(ctx context.Context, cli *clientv3.Client) (int64, error) {
	resp, err := cli.Get(ctx, keys.SeqEpoch)
	if err != nil {
		return 0, fmt.Errorf("read the sequencer epoch: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return 0, fmt.Errorf("no sequencer epoch yet")
	}
	return strconv.ParseInt(string(resp.Kvs[0].Value), 10, 64)
}

// readRetained reads every message of the set, in offset order.
func readRetained(ctx context.Context, cli *clientv3.Client, stores ledger.Dialer, r Retained) ([]Kept, error) {
	var out []Kept
	for _, l := range r.Ledgers {
		if l.Entries == 0 {
			continue
		}
		meta, err := ledger.Get(ctx, cli, l.ID)
		if err != nil {
			return nil, fmt.Errorf("retained ledger %d: %w", l.ID, err)
		}
		reader, err := ledger.NewReader(meta, meta.LastEntry, ledger.ReaderOptions{Stores: stores})
		if err != nil {
			return nil, err
		}
		err = reader.Scan(ctx, 0, l.Entries-1, func(e ledger.Entry) error {
			d, err := batch.Decode(e.Payload)
			if err != nil {
				return fmt.Errorf("retained ledger %d entry %d: %w", l.ID, e.ID, err)
			}
			records, err := d.All()
			if err != nil {
				return fmt.Errorf("retained ledger %d entry %d: %w", l.ID, e.ID, err)
			}
			out = append(out, FromBatch(d.Header, records, func(string) bool { return true })...)
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}
