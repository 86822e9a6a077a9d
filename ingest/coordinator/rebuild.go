package coordinator

import (
	"fmt"
	"slices"

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
	digests     []uint64 // RequestDigest of each window seq's message (0: not known)
	windowSize  int
	// keepDigests: compute the RequestDigest of the records the window
	// keeps (an idempotency bucket's; KeepDigests).
	keepDigests bool
}

func NewStateBuilder(id uint64, windowSize int) *StateBuilder {
	if windowSize <= 0 {
		windowSize = producer.DefaultWindowSize
	}
	return &StateBuilder{id: id, windowSize: windowSize}
}

// KeepDigests makes the builder compute the request digests of the
// messages its window keeps, as an idempotency bucket needs (IsBucketName);
// for other producers that would hash every message replayed.
func (b *StateBuilder) KeepDigests() { b.keepDigests = true }

func (b *StateBuilder) State() producer.State {
	state := producer.State{ID: b.id, Epoch: b.epoch, DurableNext: b.durableNext, Window: b.window, Keys: b.keys}
	if slices.ContainsFunc(b.digests, func(d uint64) bool { return d != 0 }) {
		state.Digests = b.digests
	}
	return state
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
				b.digests = append([]uint64(nil), s.Digests...)
				if len(b.digests) != len(b.window) {
					b.digests = make([]uint64, len(b.window))
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
		digest := uint64(0)
		if b.keepDigests && int(uint64(run.Count)-i) <= b.windowSize { // else the window drops it below
			digest = recordDigest(records[i])
		}
		b.digests = append(b.digests, digest)
	}
	b.durableNext = run.FirstSeq + uint64(run.Count)
	if len(b.window) > b.windowSize {
		b.window = append([]uint64(nil), b.window[len(b.window)-b.windowSize:]...)
		b.keys = append([]string(nil), b.keys[len(b.keys)-b.windowSize:]...)
		b.digests = append([]uint64(nil), b.digests[len(b.digests)-b.windowSize:]...)
	}
	return nil
}
