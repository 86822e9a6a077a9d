package ingest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"orderlog/ingest/coordinator"
	"orderlog/ingest/ledger"
	"orderlog/ingest/producer"
)

// rebuildProducer reads a producer's durable state from the ledgers, for a
// node that takes the producer over (DESIGN.md §6): the state snapshot in
// stateLedger, then every later entry of the same writer's ledgers. Ledgers
// of that writer that are not closed are recovered first (fenced, so the
// old writer can add nothing after the state is read).
func rebuildProducer(ctx context.Context, cli *clientv3.Client, stores ledger.Dialer, id, stateLedger uint64, windowSize int) (producer.State, error) {
	builder := coordinator.NewStateBuilder(id, windowSize)
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
		if err := scanLedger(ctx, m, stores, builder); err != nil {
			return producer.State{}, err
		}
	}
	return builder.State(), nil
}

// storeSilence is how long a rebuild's scan waits for the next entry from
// one store before reading on from the next member of the ensemble. A
// paused store keeps its connections open, and the ledger reader's stream
// from it would wait until the takeover's deadline.
const storeSilence = time.Second

// scanLedger replays a closed ledger's entries ≤ last into b, each once
// and in order, starting at each member of the ensemble in turn (two
// rounds) while stores fail or fall silent.
func scanLedger(ctx context.Context, m ledger.Metadata, stores ledger.Dialer, b *coordinator.StateBuilder) error {
	if m.LastEntry < 0 {
		return nil
	}
	var next int64
	var err error
	for start := 0; start < 2*len(m.Ensemble); start++ {
		err = scanSome(ctx, rotateEnsemble(m, start), stores, &next, b)
		var applyErr *applyError
		if err == nil || ctx.Err() != nil || errors.As(err, &applyErr) {
			break
		}
	}
	var applyErr *applyError
	if errors.As(err, &applyErr) {
		return applyErr.err
	}
	return err
}

// scanSome applies entries *next..last to b, advancing *next, until the
// reader ends or no entry has come for storeSilence.
func scanSome(ctx context.Context, m ledger.Metadata, stores ledger.Dialer, next *int64, b *coordinator.StateBuilder) error {
	r, err := ledger.NewReader(m, m.LastEntry, ledger.ReaderOptions{Stores: stores})
	if err != nil {
		return err
	}
	scanCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	silent := time.AfterFunc(storeSilence, cancel)
	defer silent.Stop()
	return r.Scan(scanCtx, *next, m.LastEntry, func(e ledger.Entry) error {
		silent.Reset(storeSilence)
		if err := b.Apply(e.Payload); err != nil {
			return &applyError{err}
		}
		*next = e.ID + 1
		return nil
	})
}

// applyError is a replay failure, which no other store can change.
type applyError struct{ err error }

func (e *applyError) Error() string { return e.err.Error() }

// rotateEnsemble returns m with its ensemble starting at member start (mod
// W), for a reader that tries the members in order.
func rotateEnsemble(m ledger.Metadata, start int) ledger.Metadata {
	k := start % len(m.Ensemble)
	m.Ensemble = append(slices.Clone(m.Ensemble[k:]), m.Ensemble[:k]...)
	return m
}
