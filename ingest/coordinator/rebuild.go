package coordinator

import (
	"fmt"

	"orderlog/ingest/batch"
	"orderlog/ingest/producer"
)

// StateBuilder replays ledger entries into one producer's state: the
// durable state a node that takes the producer over starts from
// (DESIGN.md §6).
type StateBuilder struct {
	id          uint64
	epoch       uint64
	durableNext uint64
	window      []uint64 // offsets of seqs [durableNext-len, durableNext)
	keys        []string // message id (Idempotency-Key) of each window seq
	windowSize  int
}

func NewStateBuilder(id uint64, windowSize int) *StateBuilder {
	if windowSize <= 0 {
		windowSize = producer.DefaultWindowSize
	}
	return &StateBuilder{id: id, windowSize: windowSize}
}

func (b *StateBuilder) State() producer.State {
	return producer.State{ID: b.id, Epoch: b.epoch, DurableNext: b.durableNext, Window: b.window, Keys: b.keys}
}

// Apply replays one entry payload, in ledger order.
func (b *StateBuilder) Apply(payload []byte) error {
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
func (b *StateBuilder) applyRun(run batch.ProducerRun, firstOffset uint64, records []batch.Record) error {
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
