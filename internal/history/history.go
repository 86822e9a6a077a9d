// Package history records what producers were told and checks it against
// what the log serves: the end-to-end contract of DESIGN.md §1, as crash,
// soak and chaos tests check it. It is test support with no I/O.
package history

import (
	"fmt"
	"sort"
	"sync"
	"time"
)

// Op is one message's life as a producer saw it.
type Op struct {
	Producer string
	Seq      uint64
	Sent     time.Time // first send
	Acked    time.Time // zero if never acknowledged
	Offset   uint64    // the acknowledged offset
}

// Recorder collects ops from many producers. Safe for concurrent use.
type Recorder struct {
	mu  sync.Mutex
	ops map[key]*Op
}

type key struct {
	producer string
	seq      uint64
}

// NewRecorder returns an empty recorder.
func NewRecorder() *Recorder { return &Recorder{ops: make(map[key]*Op)} }

// Sent records the first send of a message.
func (r *Recorder) Sent(producer string, seq uint64, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := key{producer, seq}
	if _, ok := r.ops[k]; !ok {
		r.ops[k] = &Op{Producer: producer, Seq: seq, Sent: at}
	}
}

// Acked records an acknowledgement. A second ack of the same message must
// name the same offset; it returns an error otherwise.
func (r *Recorder) Acked(producer string, seq, offset uint64, at time.Time) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	op, ok := r.ops[key{producer, seq}]
	if !ok {
		return fmt.Errorf("history: ack of %s/%d that was never sent", producer, seq)
	}
	if !op.Acked.IsZero() {
		if op.Offset != offset {
			return fmt.Errorf("history: %s/%d acked at offset %d and again at %d", producer, seq, op.Offset, offset)
		}
		return nil
	}
	op.Acked, op.Offset = at, offset
	return nil
}

// Ops returns a copy of every op.
func (r *Recorder) Ops() []Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Op, 0, len(r.ops))
	for _, op := range r.ops {
		out = append(out, *op)
	}
	return out
}

// Logged is one message as a reader served it.
type Logged struct {
	Offset   uint64
	Producer string
	Seq      uint64
}

// Read is a full read of [0, Committed): messages and holes in offset order.
type Read struct {
	Messages  []Logged
	Holes     [][2]uint64 // [first, end)
	Committed uint64
}

// Report counts what a check saw.
type Report struct {
	Sent, Acked, Logged, HoleOffsets int
}

func (r Report) String() string {
	return fmt.Sprintf("sent=%d acked=%d logged=%d hole_offsets=%d", r.Sent, r.Acked, r.Logged, r.HoleOffsets)
}

// Check verifies the contract over a history and a full read. It returns
// every violation it finds (up to a limit), not just the first.
func Check(ops []Op, read Read) (Report, []error) {
	c := &checker{limit: 20}
	report := Report{Sent: len(ops), Logged: len(read.Messages)}
	for _, op := range ops {
		if !op.Acked.IsZero() {
			report.Acked++
		}
	}
	for _, h := range read.Holes {
		report.HoleOffsets += int(h[1] - h[0])
	}
	c.checkDense(read)
	byKey := c.checkExactlyOnce(read)
	c.checkAcked(ops, byKey)
	c.checkProducerOrder(read)
	c.checkRealTime(ops)
	return report, c.errs
}

type checker struct {
	errs  []error
	limit int
}

func (c *checker) fail(format string, args ...any) {
	if len(c.errs) < c.limit {
		c.errs = append(c.errs, fmt.Errorf(format, args...))
	}
}

// checkDense: below C every offset is a message or a hole, exactly once.
func (c *checker) checkDense(read Read) {
	type span struct{ first, end uint64 }
	var spans []span
	for _, m := range read.Messages {
		spans = append(spans, span{m.Offset, m.Offset + 1})
	}
	for _, h := range read.Holes {
		spans = append(spans, span{h[0], h[1]})
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].first < spans[j].first })
	var next uint64
	for _, s := range spans {
		if s.first != next {
			c.fail("offsets [%d, %d) are neither a message nor a hole, or overlap", min(next, s.first), max(next, s.first))
		}
		next = max(next, s.end)
	}
	if next != read.Committed {
		c.fail("read covers [0, %d) but C is %d", next, read.Committed)
	}
}

// checkExactlyOnce: no (producer, seq) appears twice.
func (c *checker) checkExactlyOnce(read Read) map[key]uint64 {
	byKey := make(map[key]uint64, len(read.Messages))
	for _, m := range read.Messages {
		k := key{m.Producer, m.Seq}
		if first, dup := byKey[k]; dup {
			c.fail("%s/%d logged twice, at %d and %d", m.Producer, m.Seq, first, m.Offset)
			continue
		}
		byKey[k] = m.Offset
	}
	return byKey
}

// checkAcked: every acknowledged message is served at its acked offset.
func (c *checker) checkAcked(ops []Op, byKey map[key]uint64) {
	for _, op := range ops {
		if op.Acked.IsZero() {
			continue
		}
		offset, ok := byKey[key{op.Producer, op.Seq}]
		switch {
		case !ok:
			c.fail("%s/%d acknowledged at %d but not in the log", op.Producer, op.Seq, op.Offset)
		case offset != op.Offset:
			c.fail("%s/%d acknowledged at %d but logged at %d", op.Producer, op.Seq, op.Offset, offset)
		}
	}
}

// checkProducerOrder: a producer's messages are logged in seq order.
func (c *checker) checkProducerOrder(read Read) {
	last := make(map[string]uint64)
	seen := make(map[string]bool)
	for _, m := range read.Messages { // read is in offset order
		if seen[m.Producer] && m.Seq <= last[m.Producer] {
			c.fail("%s: seq %d logged after seq %d", m.Producer, m.Seq, last[m.Producer])
		}
		seen[m.Producer], last[m.Producer] = true, m.Seq
	}
}

// checkRealTime: if A was acknowledged before B was sent, A's offset is
// lower (contract 1).
func (c *checker) checkRealTime(ops []Op) {
	var acked []Op
	for _, op := range ops {
		if !op.Acked.IsZero() {
			acked = append(acked, op)
		}
	}
	byAck := append([]Op(nil), acked...)
	sort.Slice(byAck, func(i, j int) bool { return byAck[i].Acked.Before(byAck[j].Acked) })
	bySent := append([]Op(nil), acked...)
	sort.Slice(bySent, func(i, j int) bool { return bySent[i].Sent.Before(bySent[j].Sent) })
	// Sweep B by send time; keep the highest offset among ops acked before B was sent.
	i := 0
	var maxOffset uint64
	var maxOp *Op
	for _, b := range bySent {
		for i < len(byAck) && byAck[i].Acked.Before(b.Sent) {
			if maxOp == nil || byAck[i].Offset > maxOffset {
				maxOffset, maxOp = byAck[i].Offset, &byAck[i]
			}
			i++
		}
		if maxOp != nil && b.Offset <= maxOffset {
			c.fail("%s/%d (offset %d) was acknowledged before %s/%d was sent, which got the lower offset %d",
				maxOp.Producer, maxOp.Seq, maxOffset, b.Producer, b.Seq, b.Offset)
		}
	}
}

// Below is r cut to [0, end): the messages and holes below end, with
// Committed = end. end must not exceed r.Committed.
func (r Read) Below(end uint64) Read {
	out := Read{Messages: below(r.Messages, end), Committed: end}
	for _, h := range r.Holes {
		if h[0] < end {
			out.Holes = append(out.Holes, [2]uint64{h[0], min(h[1], end)})
		}
	}
	return out
}
