package coordinator

import (
	"slices"

	"orderlog/ingest/pipeline"
)

// simChecker holds what the world has made durable and acknowledged, and
// fails the run at the first step that breaks an invariant.
type simChecker struct {
	w         *simWorld
	atOffset  map[uint64]simMsg // durable offset → its message
	seqOffset map[seqKey]uint64 // durable (producer, seq) → offset
	keyOffset map[string]uint64 // durable Idempotency-Key → offset
	// durableNext is, per producer, the seq that must become durable next:
	// seqs become durable in order and without a gap.
	durableNext  map[uint64]uint64
	acks         map[seqKey]uint64
	keyAcks      map[string]uint64
	ackedThrough map[uint64]uint64 // per producer, one past its highest acknowledged seq
}

func newSimChecker(w *simWorld) simChecker {
	return simChecker{w: w, atOffset: make(map[uint64]simMsg), seqOffset: make(map[seqKey]uint64),
		keyOffset: make(map[string]uint64), durableNext: make(map[uint64]uint64), acks: make(map[seqKey]uint64),
		keyAcks: make(map[string]uint64), ackedThrough: make(map[uint64]uint64)}
}

// durable takes in the entries of l that became durable since last time.
// Durable entries never go away again.
func (c *simChecker) durable(l *simLedger) {
	if l.durableThrough() < l.durable {
		c.w.fatalf("L%d: entries through %d were durable, now only through %d", l.id, l.durable, l.durableThrough())
	}
	for l.durable < l.durableThrough() {
		l.durable++
		e := l.entries[l.durable]
		for i, msg := range e.msgs {
			c.logged(e.first+uint64(i), msg, l)
		}
	}
}

func (c *simChecker) logged(offset uint64, msg simMsg, l *simLedger) {
	w := c.w
	if other, ok := c.atOffset[offset]; ok {
		w.fatalf("offset %d logged twice: %+v and %+v (L%d)", offset, other, msg, l.id)
	}
	c.atOffset[offset] = msg
	if msg.producer == 0 {
		return // at least once: no seq to check
	}
	k := seqKey{msg.producer, msg.seq}
	if other, ok := c.seqOffset[k]; ok {
		w.fatalf("producer %d seq %d logged twice: offsets %d and %d (L%d)", msg.producer, msg.seq, other, offset, l.id)
	}
	c.seqOffset[k] = offset
	if next := c.durableNext[msg.producer]; msg.seq != next {
		w.fatalf("producer %d: seq %d durable at offset %d (L%d) while seq %d is not", msg.producer, msg.seq, offset, l.id, next)
	}
	c.durableNext[msg.producer]++
	if msg.key == "" {
		return
	}
	if other, ok := c.keyOffset[msg.key]; ok {
		w.fatalf("key %s logged twice: offsets %d and %d", msg.key, other, offset)
	}
	c.keyOffset[msg.key] = offset
}

// acked checks an acknowledgement: durable at that offset, holding the
// message the frame sent, and the same offset every time the seq is
// acknowledged.
func (c *simChecker) acked(producerID, seq, offset uint64, value string) {
	k := seqKey{producerID, seq}
	if before, ok := c.acks[k]; ok && before != offset {
		c.w.fatalf("producer %d seq %d acknowledged at offset %d, earlier at %d", producerID, seq, offset, before)
	}
	if durable, ok := c.seqOffset[k]; !ok || durable != offset {
		c.w.fatalf("producer %d seq %d acknowledged at offset %d before it was durable there (durable: %d, %v)", producerID, seq, offset, durable, ok)
	}
	c.holds(offset, value)
	c.acks[k] = offset
	c.ackedThrough[producerID] = max(c.ackedThrough[producerID], seq+1)
	c.w.stats.acked++
}

func (c *simChecker) keyAcked(key string, offset uint64) {
	if before, ok := c.keyAcks[key]; ok && before != offset {
		c.w.fatalf("key %s acknowledged at offset %d, earlier at %d", key, offset, before)
	}
	if durable, ok := c.keyOffset[key]; !ok || durable != offset {
		c.w.fatalf("key %s acknowledged at offset %d before it was durable there (durable: %d, %v)", key, offset, durable, ok)
	}
	c.holds(offset, key)
	c.keyAcks[key] = offset
	c.w.stats.acked++
}

// anonAcked checks the ack of an at-least-once message.
func (c *simChecker) anonAcked(value string, offset uint64) {
	if _, ok := c.atOffset[offset]; !ok {
		c.w.fatalf("%s acknowledged at offset %d before it was durable", value, offset)
	}
	c.holds(offset, value)
	c.w.stats.acked++
}

// holds checks that the durable message at offset is the one acknowledged.
func (c *simChecker) holds(offset uint64, value string) {
	if got := c.atOffset[offset].value; got != value {
		c.w.fatalf("%s acknowledged at offset %d, which holds %s", value, offset, got)
	}
}

// written checks a Written report against the ledger: a durable entry
// holding exactly that span.
func (c *simChecker) written(r pipeline.WrittenReport) {
	l := c.w.ledger.all[r.Ledger]
	if r.Entry > l.durableThrough() {
		c.w.fatalf("Written for entry %d of L%d beyond its durable %d", r.Entry, r.Ledger, l.durableThrough())
	}
	e := l.entries[r.Entry]
	if e.first != r.Span.First || e.first+uint64(len(e.msgs)) != r.Span.End {
		c.w.fatalf("Written [%d,%d) for entry %d of L%d, which holds [%d,%d)", r.Span.First, r.Span.End, r.Entry, r.Ledger,
			e.first, e.first+uint64(len(e.msgs)))
	}
}

// unused checks an Unused report: no batch was ever appended over it.
func (c *simChecker) unused(u pipeline.UnusedReport) {
	for _, sent := range c.w.ledger.all[u.Ledger].sent {
		if sent.First < u.Span.End && u.Span.First < sent.End {
			c.w.fatalf("Unused [%d,%d) on L%d, where [%d,%d) was appended", u.Span.First, u.Span.End, u.Ledger, sent.First, sent.End)
		}
	}
}

// snapshotDurable checks a state ledger about to be recorded: it holds a
// durable snapshot of the producer.
func (c *simChecker) snapshotDurable(r StateRecord) {
	l := c.w.ledger.all[r.Ledger]
	for _, e := range l.entries[:l.durableThrough()+1] {
		if slices.Contains(e.snapshotOf, r.Producer) {
			return
		}
	}
	c.w.fatalf("L%d recorded as p%d's state ledger without a durable snapshot of it", r.Ledger, r.Producer)
}
