package producer

import "fmt"

// DefaultWindowSize is how many durable (seq → offset) pairs each producer
// remembers for duplicate answers.
const DefaultWindowSize = 1024

// Verdict is what to do with one message of a frame.
type Verdict int

const (
	// Accept: a new message; log it.
	Accept Verdict = iota + 1
	// Duplicate: already durable; answer with Offset.
	Duplicate
	// DuplicateWithoutOffset: durable, but older than the dedup window.
	DuplicateWithoutOffset
	// InFlight: accepted earlier and not yet resolved; wait for its outcome.
	InFlight
)

// Decision is the answer for a whole frame [FirstSeq, FirstSeq+n): every
// message below AcceptFrom is a duplicate or in flight, the rest is new.
type Decision struct {
	// AcceptFrom is the first seq of the frame that is new (FirstSeq+n if none).
	AcceptFrom uint64
}

// RefusalError is returned when a frame is refused as a whole; nothing of it
// may be logged.
type RefusalError struct {
	Reason      Refusal
	ExpectedSeq uint64 // with OutOfOrderSequence
	Epoch       uint64 // the producer's current epoch
}

// Refusal names why a frame was refused.
type Refusal int

const (
	// OutOfOrderSequence: the frame starts beyond the next expected seq.
	OutOfOrderSequence Refusal = iota + 1
	// Fenced: the frame's epoch is older than the producer's.
	Fenced
	// UnknownProducer: the producer is not owned here, or the epoch is newer
	// than any this node registered (the client must InitProducer).
	UnknownProducer
)

func (e *RefusalError) Error() string {
	switch e.Reason {
	case OutOfOrderSequence:
		return fmt.Sprintf("producer: out of order sequence, expected %d", e.ExpectedSeq)
	case Fenced:
		return fmt.Sprintf("producer: fenced by epoch %d", e.Epoch)
	default:
		if e.Epoch > 0 {
			return fmt.Sprintf("producer: epoch newer than the registered %d: call InitProducer", e.Epoch)
		}
		return "producer: not owned here"
	}
}

// State is one producer's durable state: what a snapshot carries and what a
// new owner rebuilds.
type State struct {
	ID          uint64
	Epoch       uint64
	DurableNext uint64 // last durable seq + 1
	// Window holds the offsets of seqs [DurableNext-len(Window), DurableNext).
	Window []uint64
	// Keys, for an idempotency-key bucket (a virtual producer), holds the
	// key of each seq in Window (same length); empty for other producers.
	// The table does not keep keys: the ingest node does.
	Keys []string
	// Digests, aligned with Keys (or empty), are the digests of the
	// requests that used them (coordinator.RequestDigest): a key reused
	// with another body is refused. 0: not known (a key remembered from
	// before digests were kept).
	Digests []uint64
}

type producerState struct {
	epoch        uint64
	durableNext  uint64
	acceptedNext uint64
	window       offsetWindow
}

// Table is the producer state of one ingest node. Not safe for concurrent
// use: the pipeline serializes calls.
type Table struct {
	windowSize int
	producers  map[uint64]*producerState
}

// NewTable returns an empty table; windowSize ≤ 0 means DefaultWindowSize.
func NewTable(windowSize int) *Table {
	if windowSize <= 0 {
		windowSize = DefaultWindowSize
	}
	return &Table{windowSize: windowSize, producers: make(map[uint64]*producerState)}
}

// Register installs or replaces a producer's state (after InitProducer, a
// handover or a rebuild). Any in-flight accounting of an older registration
// is dropped: the caller resolves in-flight messages before a handover.
func (t *Table) Register(s State) {
	p := &producerState{epoch: s.Epoch, durableNext: s.DurableNext, acceptedNext: s.DurableNext,
		window: newOffsetWindow(t.windowSize)}
	window := s.Window
	if uint64(len(window)) > s.DurableNext { // a window cannot reach below seq 0
		window = window[uint64(len(window))-s.DurableNext:]
	}
	first := s.DurableNext - uint64(len(window))
	for i, offset := range window {
		p.window.put(first+uint64(i), offset)
	}
	t.producers[s.ID] = p
}

// Remove forgets a producer (it moved to another owner).
func (t *Table) Remove(id uint64) { delete(t.producers, id) }

// Check decides a frame of n messages starting at firstSeq and, when it is
// not refused, marks its new part accepted (in flight).
func (t *Table) Check(id, epoch, firstSeq uint64, n int) (Decision, error) {
	p, ok := t.producers[id]
	if !ok {
		return Decision{}, &RefusalError{Reason: UnknownProducer}
	}
	if epoch > p.epoch {
		return Decision{}, &RefusalError{Reason: UnknownProducer, Epoch: p.epoch}
	}
	if epoch < p.epoch {
		return Decision{}, &RefusalError{Reason: Fenced, Epoch: p.epoch}
	}
	if firstSeq > p.acceptedNext {
		return Decision{}, &RefusalError{Reason: OutOfOrderSequence, ExpectedSeq: p.acceptedNext, Epoch: p.epoch}
	}
	end := firstSeq + uint64(n)
	acceptFrom := max(firstSeq, min(p.acceptedNext, end))
	if end > p.acceptedNext {
		p.acceptedNext = end
	}
	return Decision{AcceptFrom: acceptFrom}, nil
}

// Lookup says what an already-seen seq (below the accepted end) is now.
func (t *Table) Lookup(id, seq uint64) (Verdict, uint64) {
	p, ok := t.producers[id]
	switch {
	case !ok || seq >= p.acceptedNext:
		return Accept, 0
	case seq >= p.durableNext:
		return InFlight, 0
	}
	if offset, ok := p.window.get(seq); ok {
		return Duplicate, offset
	}
	return DuplicateWithoutOffset, 0
}

// Durable records that seqs [firstSeq, firstSeq+len(offsets)) are durable at
// the given offsets. Durability is reported in seq order.
func (t *Table) Durable(id, firstSeq uint64, offsets []uint64) error {
	p, ok := t.producers[id]
	if !ok {
		return fmt.Errorf("producer: durable report for unknown producer %d", id)
	}
	if firstSeq != p.durableNext || firstSeq+uint64(len(offsets)) > p.acceptedNext {
		return fmt.Errorf("producer %d: durable [%d, +%d) but durable next is %d, accepted next %d",
			id, firstSeq, len(offsets), p.durableNext, p.acceptedNext)
	}
	for i, offset := range offsets {
		p.window.put(firstSeq+uint64(i), offset)
	}
	p.durableNext += uint64(len(offsets))
	return nil
}

// Failed records that the in-flight attempt of fromSeq failed for good, and
// with it every later accepted seq: the producer must send them again.
func (t *Table) Failed(id, fromSeq uint64) {
	if p, ok := t.producers[id]; ok && fromSeq >= p.durableNext && fromSeq < p.acceptedNext {
		p.acceptedNext = fromSeq
	}
}

// Snapshot returns the durable state of every producer (in-flight seqs are
// not part of it), for the producer-table snapshot at the head of a ledger.
func (t *Table) Snapshot() []State {
	states := make([]State, 0, len(t.producers))
	for id, p := range t.producers {
		states = append(states, State{ID: id, Epoch: p.epoch, DurableNext: p.durableNext,
			Window: p.window.offsets(p.durableNext)})
	}
	return states
}

// Get returns one producer's durable state.
func (t *Table) Get(id uint64) (State, bool) {
	p, ok := t.producers[id]
	if !ok {
		return State{}, false
	}
	return State{ID: id, Epoch: p.epoch, DurableNext: p.durableNext, Window: p.window.offsets(p.durableNext)}, true
}

// Fence raises a producer's epoch: frames of older epochs are refused from
// now on, while its in-flight messages still complete.
func (t *Table) Fence(id, epoch uint64) {
	if p, ok := t.producers[id]; ok && epoch > p.epoch {
		p.epoch = epoch
	}
}

// InFlight is the number of a producer's accepted, not yet durable seqs.
func (t *Table) InFlight(id uint64) uint64 {
	if p, ok := t.producers[id]; ok {
		return p.acceptedNext - p.durableNext
	}
	return 0
}

// Len is the number of producers in the table.
func (t *Table) Len() int { return len(t.producers) }

// NextSeq is the seq the producer's next new message must have.
func (t *Table) NextSeq(id uint64) (uint64, bool) {
	p, ok := t.producers[id]
	if !ok {
		return 0, false
	}
	return p.acceptedNext, true
}
