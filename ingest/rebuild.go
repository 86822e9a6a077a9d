package ingest

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"orderlog/ingest/coordinator"
	"orderlog/ingest/ledger"
	"orderlog/ingest/producer"
)

// rebuildProducer reads a producer's durable state from the ledgers, for a
// node that takes the producer over (DESIGN.md §6): the state snapshot in
// stateLedger, then every later entry of the same writer's ledgers. Ledgers
// of that writer that are not closed are recovered first (fenced, so the
// old writer can add nothing after the state is read). An idempotency
// bucket's rebuild also computes its window's request digests.
func rebuildProducer(ctx context.Context, cli *clientv3.Client, stores ledger.Dialer, silent *ledger.SilentStores, id, stateLedger uint64, windowSize int, bucket bool) (producer.State, error) {
	builder := coordinator.NewStateBuilder(id, windowSize)
	if bucket {
		builder.KeepDigests()
	}
	if stateLedger == 0 {
		return builder.State(), nil
	}
	first, err := ledger.Get(ctx, cli, stateLedger)
	if err != nil {
		return producer.State{}, fmt.Errorf("producer %d state ledger %d: %w", id, stateLedger, err)
	}
	ledgers, err := ledger.List(ctx, cli, ledger.Filter{Writer: first.WriterIncarnation})
	if err != nil {
		return producer.State{}, err
	}
	for _, m := range ledgers {
		if m.ID < stateLedger {
			continue
		}
		if m.State != ledger.StateClosed {
			id := m.ID
			if m, err = ledger.Recover(ctx, cli, id, ledger.RecoverOptions{Stores: stores}); err != nil {
				return producer.State{}, fmt.Errorf("recover ledger %d of %s: %w", id, first.WriterIncarnation, err)
			}
		}
		if err := scanLedger(ctx, m, stores, silent, builder); err != nil {
			return producer.State{}, err
		}
	}
	return builder.State(), nil
}

// scanLedger replays a closed ledger's entries ≤ last into b, each once
// and in order. The reader reads on from the next member of the ensemble
// while stores fail or fall silent (a paused node keeps its connections
// open): a takeover does not wait for a paused node's store.
func scanLedger(ctx context.Context, m ledger.Metadata, stores ledger.Dialer, silent *ledger.SilentStores, b *coordinator.StateBuilder) error {
	if m.LastEntry < 0 {
		return nil
	}
	r, err := ledger.NewReader(m, m.LastEntry, ledger.ReaderOptions{Stores: stores, Silent: silent})
	if err != nil {
		return err
	}
	return r.Scan(ctx, 0, m.LastEntry, func(e ledger.Entry) error { return b.Apply(e.Payload) })
}
