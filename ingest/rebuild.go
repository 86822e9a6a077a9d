package ingest

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"orderlog/ingest/batch"
	"orderlog/ingest/ledger"
	"orderlog/ingest/producer"
)

// rebuildProducer reads a producer's durable state from the ledgers, for a
// node that takes the producer over (DESIGN.md §6): the state snapshot in
// stateLedger, then every later entry of the same writer's ledgers. Ledgers
// of that writer that are not closed are recovered first (fenced, so the
// old writer can add nothing after the state is read).
func rebuildProducer(ctx context.Context, cli *clientv3.Client, stores ledger.Dialer, id, stateLedger uint64, windowSize int) (producer.State, error) {
	builder := newStateBuilder(id, windowSize)
	if stateLedger == 0 {
		return builder.state(), nil
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
		if err := builder.scanLedger(ctx, m, stores); err != nil {
			return producer.State{}, err
		}
	}
	return builder.state(), nil
}

// stateBuilder replays entries into one producer's state.
type stateBuilder struct {
	id          uint64
	epoch       uint64
	durableNext uint64
	window      []uint64 // offsets of seqs [durableNext-len, durableNext)
	keys        []string // message id (Idempotency-Key) of each window seq
	windowSize  int
}

func newStateBuilder(id uint64, windowSize int) *stateBuilder {
	if windowSize <= 0 {
		windowSize = producer.DefaultWindowSize
	}
	return &stateBuilder{id: id, windowSize: windowSize}
}

func (b *stateBuilder) state() producer.State {
	return producer.State{ID: b.id, Epoch: b.epoch, DurableNext: b.durableNext, Window: b.window, Keys: b.keys}
}

func (b *stateBuilder) scanLedger(ctx context.Context, m ledger.Metadata, stores ledger.Dialer) error {
	if m.LastEntry < 0 {
		return nil
	}
	r, err := ledger.NewReader(m, m.LastEntry, ledger.ReaderOptions{Stores: stores})
	if err != nil {
		return err
	}
	return r.Scan(ctx, 0, m.LastEntry, func(e ledger.Entry) error { return b.apply(e.Payload) })
}

// apply replays one entry payload.
func (b *stateBuilder) apply(payload []byte) error {
	kind, err := batch.PeekKind(payload)
	if err != nil {
		return err
	}
	if kind == batch.KindProducerSnapshot {
		_, states, err := batch.DecodeSnapshot(payload)
		if err != nil {
			return err
		}
		for _, s := range states {
			switch {
			case s.ID != b.id:
			case s.DurableNext < b.durableNext:
				// Older than what the entries before it made durable (a
				// snapshot taken before its ledger's predecessor was fully
				// logged): the replayed state is the truth.
				b.epoch = max(b.epoch, s.Epoch)
			default:
				b.epoch, b.durableNext, b.window = s.Epoch, s.DurableNext, append([]uint64(nil), s.Window...)
				b.keys = append([]string(nil), s.Keys...)
				if len(b.keys) != len(b.window) {
					b.keys = make([]string, len(b.window))
				}
			}
		}
		return nil
	}
	d, err := batch.Decode(payload)
	if err != nil {
		return err
	}
	var records []batch.Record // decoded only if the entry has a run of this producer
	index := 0
	for _, run := range d.Runs {
		if run.ProducerID == b.id && run.FirstSeq+uint64(run.Count) > b.durableNext {
			if records == nil {
				if records, err = d.All(); err != nil {
					return err
				}
			}
			if err := b.applyRun(run, d.FirstOffset+uint64(index), records[index:index+int(run.Count)]); err != nil {
				return err
			}
		}
		index += int(run.Count)
	}
	return nil
}

// applyRun extends the state with a run's seqs beyond durableNext. Runs of
// one producer are logged in seq order, so a run starts at or below it; one
// that starts beyond it means seqs are missing from what was replayed, and
// the window would give later seqs wrong offsets, so the rebuild fails.
func (b *stateBuilder) applyRun(run batch.ProducerRun, firstOffset uint64, records []batch.Record) error {
	if run.FirstSeq > b.durableNext {
		return fmt.Errorf("producer %d: logged seqs jump from %d to %d", b.id, b.durableNext, run.FirstSeq)
	}
	b.epoch = max(b.epoch, run.Epoch)
	skip := b.durableNext - min(b.durableNext, run.FirstSeq)
	for i := skip; i < uint64(run.Count); i++ {
		b.window = append(b.window, firstOffset+i)
		b.keys = append(b.keys, string(records[i].MessageID))
	}
	b.durableNext = run.FirstSeq + uint64(run.Count)
	if len(b.window) > b.windowSize {
		b.window = append([]uint64(nil), b.window[len(b.window)-b.windowSize:]...)
		b.keys = append([]string(nil), b.keys[len(b.keys)-b.windowSize:]...)
	}
	return nil
}
