package ingest

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"orderlog/ingest/batch"
	"orderlog/ingest/coordinator"
	"orderlog/ingest/ledger"
	"orderlog/ingest/pipeline"
	"orderlog/ingest/producer"
	"orderlog/internal/event"
	"orderlog/internal/grpcopt"
)

// retryPause is the pause before retrying a failed etcd or ledger operation.
const retryPause = coordinator.RetryPause

// openLedger creates a ledger of the sequencer's current epoch in the
// background, after the pause the machine asks for, and writes the
// producer-table snapshot as its entry 0 before any batch (DESIGN.md §6).
func (n *Node) openLedger(open *coordinator.OpenLedger) {
	reg := n.reg
	n.async(func() {
		if !n.pauseUntilNewStream(open.Pause, reg.grants) {
			return
		}
		epoch := reg.grants.Epoch()
		w, err := n.createLedger(epoch, reg.incarnation, open.Snapshot)
		if errors.Is(err, ledger.ErrStaleEpoch) { // a new leader: the session learns its epoch when its stream to it opens
			if !n.waitForEpochAbove(epoch, staleEpochWait, reg.grants) {
				return
			}
			w, err = n.createLedger(reg.grants.Epoch(), reg.incarnation, open.Snapshot)
		}
		incarnation := reg.incarnation
		if err != nil {
			n.metrics.ledgerErrors.Inc()
			n.ledgerErrors.report(n.logger, err)
			if open.Roll { // the open ledger goes on: try the roll again later, not at once
				n.doFor(incarnation, func() { n.rollFailed(); n.machine.LedgerOpenFailed() })
			} else if n.sleep(retryPause) {
				n.doFor(incarnation, n.machine.LedgerOpenFailed)
			}
			return
		}
		installed := make(chan bool, 1)
		n.do(func() {
			current := n.reg.incarnation == incarnation
			if current {
				n.ledgerOpened(w, open.Reason)
			}
			installed <- current
		})
		var opened bool
		select {
		case opened = <-installed:
		case <-n.done: // the loop stopped; it may have taken the ledger just before
			select {
			case opened = <-installed:
			default:
			}
		}
		if !opened { // the node stopped, or lost its lease meanwhile
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, _ = w.Close(ctx)
			cancel()
		}
	})
}

// pauseUntilNewStream waits the pause refused grants asked for, cut short
// when the grant session learns of a new sequencer epoch or opens a new
// stream: the refusals came from a leader that is gone or from having no
// stream at all, and a leader that answers now grants at once. False if
// the node stopped meanwhile.
func (n *Node) pauseUntilNewStream(pause time.Duration, grants GrantSession) bool {
	epoch, streams := grants.Epoch(), grants.Streams()
	return n.waitUntil(pause, func() bool { return grants.Epoch() != epoch || grants.Streams() != streams })
}

// staleEpochWait bounds the wait for a new leader's epoch after a ledger
// was refused as of an older one: the epoch is written first thing in a
// takeover, and the session reads it when it opens a stream to the new
// leader; the ledger is tried again either way.
const staleEpochWait = time.Second

// waitForEpochAbove waits until grants knows an epoch above epoch, at most
// d. False if the node stopped meanwhile.
func (n *Node) waitForEpochAbove(epoch int64, d time.Duration, grants GrantSession) bool {
	return n.waitUntil(d, func() bool { return grants.Epoch() > epoch })
}

// waitUntil polls done every 10 ms for at most d, returning early once it
// holds. False if the node stopped meanwhile.
func (n *Node) waitUntil(d time.Duration, done func() bool) bool {
	end := time.Now().Add(d)
	for wait := time.Until(end); wait > 0 && !done(); wait = time.Until(end) {
		if !n.sleep(min(wait, 10*time.Millisecond)) {
			return false
		}
	}
	return true
}

// sleep waits d; false if the node stopped meanwhile.
func (n *Node) sleep(d time.Duration) bool {
	if d <= 0 {
		return true
	}
	select {
	case <-time.After(d):
		return true
	case <-n.stop:
		return false
	}
}

func (n *Node) ledgerOpened(w *ledger.Writer, reason string) {
	n.roll = rollBackoff{}
	n.writers[w.ID()] = &openWriter{Writer: w, opened: time.Now()}
	n.metrics.ledgersOpened.Inc()
	n.events.LedgerOpened(event.LedgerInfo{Ledger: w.ID(), Epoch: uint64(w.Metadata().Epoch), Writer: n.reg.incarnation, Last: -1, Reason: reason})
	n.machine.LedgerOpened(w.ID(), w.LAC())
}

// repeatedError logs a retried failure when its text changes, and again
// every repeatedErrorEvery while it lasts: a setting that cannot work (W
// larger than the stores there are) must not look like a slow system.
type repeatedError struct {
	mu     sync.Mutex
	last   string
	logged time.Time
}

const repeatedErrorEvery = 30 * time.Second

func (r *repeatedError) report(logger *slog.Logger, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if text := err.Error(); text != r.last || time.Since(r.logged) >= repeatedErrorEvery {
		r.last, r.logged = text, time.Now()
		logger.Warn("ingest: cannot open a ledger (retrying)", "err", err)
	}
}

func (n *Node) createLedger(epoch int64, incarnation string, snapshot []producer.State) (*ledger.Writer, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	members, err := n.ensemble(ctx, n.cfg.W)
	if err != nil {
		return nil, err
	}
	var ledgerID uint64 // set before the first entry can be confirmed
	opts := ledger.WriterOptions{OnConfirm: func(lac int64) {
		id := ledgerID
		n.do(func() { n.machine.Confirmed(id, lac) })
	}, ReleasePayload: grpcopt.PutBuffer, UnreachableAfter: n.cfg.UnreachableAfter}
	// Any request may ask for ack mode leader; with an ack quorum of one
	// it is the quorum's ack anyway (the local store is tried first).
	if n.cfg.LocalStore != "" && (n.cfg.AckMode == AckLeader || n.cfg.A > 1) {
		opts.LocalStore = n.cfg.LocalStore
		opts.OnLocalDurable = func(entry int64) {
			id := ledgerID
			n.do(func() { n.machine.LocallyDurable(id, entry) })
		}
	}
	w, err := ledger.Create(ctx, n.etcd, ledger.CreateOptions{
		Epoch: epoch, WriterIncarnation: incarnation, Kind: ledger.KindIngest, Ensemble: members, W: n.cfg.W,
		AckQuorum: n.cfg.A, Tolerate: n.cfg.Tolerate, Stores: n.stores, Writer: opts,
	})
	if err != nil {
		return nil, err
	}
	ledgerID = w.ID()
	payload, err := batch.EncodeSnapshot(nil, time.Now().UnixMicro(), snapshot)
	if err == nil {
		_, err = w.Append(payload, ledger.Span{})
	}
	if err != nil {
		_, _ = w.Close(ctx)
		return nil, err
	}
	return w, nil
}

// appendEntries writes the machine's entries to the open ledger, in order.
// After a failed append the rest of that ledger's entries are skipped (the
// machine closes it and grants them again).
func (n *Node) appendEntries(appends []coordinator.Append) {
	for _, a := range appends {
		w := n.writers[a.Ledger]
		if w == nil {
			continue
		}
		entry, err := n.appendEntry(w, a)
		if err != nil {
			n.ledgerFailed(a.Ledger, "append failed: "+err.Error())
			n.closeWriter(a.Ledger)
			continue
		}
		if entry != a.Entry {
			panic("ingest: ledger entry numbering differs from the machine's: a bug")
		}
	}
}

func (n *Node) appendEntry(w *openWriter, a coordinator.Append) (int64, error) {
	if a.Batch == nil {
		payload, err := batch.EncodeSnapshot(nil, time.Now().UnixMicro(), a.Snapshot)
		if err != nil {
			return -1, err
		}
		w.bytes += int64(len(payload))
		return w.Append(payload, ledger.Span{})
	}
	b := a.Batch
	payload, err := n.encodeBatch(b)
	if err != nil {
		panic("ingest: batch does not encode: " + err.Error()) // the pipeline built it: a bug
	}
	w.bytes += int64(len(payload))
	entry, err := w.AppendCounted(payload, ledger.Span{First: b.First, End: b.First + uint64(len(b.Messages))}, n.countedTopics(b))
	if err != nil {
		return -1, err
	}
	b.AppendedAt = time.Now()
	for _, m := range b.Messages {
		frameOf(m.Payload.(*coordinator.MessageRef).Frame).times.appended = b.AppendedAt
	}
	n.metrics.appendWait.Observe(b.AppendedAt.Sub(frameOf(b.Messages[0].Payload.(*coordinator.MessageRef).Frame).arrived).Seconds())
	n.metrics.batchMessages.Observe(float64(len(b.Messages)))
	n.metrics.appendedBytes.Add(float64(len(payload)))
	return entry, nil
}

// checkWriter notices a writer that failed without an append to tell, and
// rolls a ledger that lost an ensemble member for good (DESIGN §4): its
// later entries would have one copy fewer, and its recovery after the next
// fault could wait for a store that no longer answers for it.
func (n *Node) checkWriter() {
	for _, id := range n.writerIDs() {
		w := n.writers[id]
		if err := w.Err(); err != nil {
			n.ledgerFailed(id, "writer failed: "+err.Error())
		} else if lost := w.LostMember(); lost != nil {
			n.ledgerFailed(id, "lost a member: "+lost.Error())
		}
	}
}

// ensembleCheckEvery is how often a node reads the store registrations
// to see whether its open ledger needs rolling (checkEnsemble).
const ensembleCheckEvery = time.Second

// checkEnsemble rolls the open ledger when its ensemble is weaker than it
// could be, from the registrations alone, so that an idle ledger is
// rolled as well as a busy one (whose appends tell the writer):
//   - degraded (created on fewer stores than W, while a store was down)
//     and enough stores registered for a full ensemble: with W = A stores
//     no entry has a copy to spare;
//   - a member lost for good (its store came back empty, or another store
//     holds its address: ledger.LostMembers).
//
// Either way, after the next fault its recovery would wait for the failed
// store: an idle ledger whose member was wiped, left open, stopped every
// write for 30 s when its writer's node was killed next.
func (n *Node) checkEnsemble() {
	w := n.currentWriter()
	if w == nil || n.checkingStores {
		return
	}
	n.checkingStores = true
	meta := w.Metadata()
	n.async(func() {
		ctx, cancel := context.WithTimeout(context.Background(), ensembleCheckEvery)
		live, err := ledger.LiveStores(ctx, n.etcd)
		cancel()
		n.do(func() {
			n.checkingStores = false
			if ow := n.writers[w.ID()]; err != nil || ow == nil || ow.Writer != w {
				return
			}
			if why := ledger.Weakness(meta, live); why != "" {
				n.ledgerFailed(w.ID(), why)
			}
		})
	})
}

// ledgerFailed tells the machine the ledger can take no more writes, and
// notes why for its LedgerClosed event.
func (n *Node) ledgerFailed(id uint64, reason string) {
	if id != 0 && id == n.machine.RollLedger() {
		n.rollFailed() // a roll's ledger that failed at once: not again at the next tick
	}
	n.noteCloseReason(id, reason)
	n.machine.LedgerFailed(id)
}

// noteCloseReason keeps the first reason the open ledger is given up for
// (a ledger that is not open is closed already, or being closed).
func (n *Node) noteCloseReason(id uint64, reason string) {
	if _, ok := n.closeReasons[id]; !ok && n.writers[id] != nil {
		n.closeReasons[id] = reason
	}
}

// closeLedgers closes the ledgers the machine gave up, at their LAC
// (DESIGN.md §3 step 6): the writer freezes its LAC before the close.
func (n *Node) closeLedgers(ids []uint64) {
	for _, id := range ids {
		n.closeWriter(id)
	}
}

// closeWriter closes ledger id's writer, if open, in the background,
// retrying until it is closed, and reports its last entry to the machine.
func (n *Node) closeWriter(id uint64) {
	w := n.writers[id]
	if w == nil {
		return
	}
	delete(n.writers, id)
	reason := n.closeReasons[id]
	delete(n.closeReasons, id)
	incarnation := n.reg.incarnation
	n.async(func() {
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			meta, err := w.Close(ctx)
			cancel()
			if err == nil {
				n.events.LedgerClosed(event.LedgerInfo{Ledger: id, Epoch: uint64(meta.Epoch), Writer: incarnation, Last: meta.LastEntry, Reason: reason})
				n.doFor(incarnation, func() { n.machine.LedgerClosed(id, meta.LastEntry) })
				return
			}
			if !n.sleep(retryPause) {
				return
			}
		}
	})
}

// CloseLedgerRequested is called when the sequencer asks this node to close
// a ledger (a grant lease expired, or a new leader took over).
func (n *Node) CloseLedgerRequested(ledgerID uint64) {
	n.do(func() { n.ledgerFailed(ledgerID, "the sequencer asked for a close") })
}

func (n *Node) onGrantReply(r GrantReply) {
	if asked, ok := n.grantAsked[r.BatchID]; ok {
		n.metrics.grantLatency.Observe(time.Since(asked).Seconds())
		delete(n.grantAsked, r.BatchID)
	}
	if r.Err != nil {
		n.metrics.grantRefusals.Inc()
		n.noteCloseReason(r.Ledger, "grant refused: "+r.Err.Error())
		n.machine.GrantRefused(r.BatchID, r.Ledger)
		return
	}
	n.metrics.grants.Inc()
	n.machine.Granted(r.BatchID, r.First)
}

// encodeBatch builds the entry payload of a granted batch. The payload
// comes from the shared buffer pool and goes back to it once every store
// acked it (the writer's ReleasePayload): a fresh buffer per batch was 40 %
// of the bytes the write path allocated at 170k msg/s, and the collector
// cycles it drove showed in the p99.
func (n *Node) encodeBatch(b *pipeline.Batch) ([]byte, error) {
	return n.encoder.Encode(b, time.Now().UnixMicro(), grpcopt.GetBuffer)
}

// SetByteLimitedTopics installs the topics with a byte limit
// (retention_bytes): only theirs are counted in the ledgers' records, which
// every pass of the retention worker reads.
func (n *Node) SetByteLimitedTopics(topics map[string]bool) {
	n.byteLimited.Store(&topics)
}

// CountsTopic reports whether the node counts topic's bytes in its
// ledgers (it learned the topic's byte limit).
func (n *Node) CountsTopic(topic string) bool {
	limited := n.byteLimited.Load()
	return limited != nil && (*limited)[topic]
}

// countedTopics is what each byte-limited topic's messages take in b.
func (n *Node) countedTopics(b *pipeline.Batch) []ledger.TopicBytes {
	limited := n.byteLimited.Load()
	if limited == nil || len(*limited) == 0 {
		return nil
	}
	return batchTopics(b, *limited)
}

// batchTopics is what each of the topics' messages take in b. A batch
// mostly holds one topic or a few: those are found by a scan, many
// through an index.
func batchTopics(b *pipeline.Batch, topics map[string]bool) []ledger.TopicBytes {
	const scanned = 8
	var out []ledger.TopicBytes
	var index map[string]int
	for _, m := range b.Messages {
		topic := m.Payload.(*coordinator.MessageRef).Record.Topic
		if !topics[topic] {
			continue
		}
		i := -1
		if index != nil {
			if j, ok := index[topic]; ok {
				i = j
			}
		} else {
			i = slices.IndexFunc(out, func(t ledger.TopicBytes) bool { return t.Topic == topic })
		}
		if i >= 0 {
			out[i].Bytes += int64(m.Size)
			continue
		}
		out = append(out, ledger.TopicBytes{Topic: topic, Bytes: int64(m.Size)})
		if index != nil {
			index[topic] = len(out) - 1
		} else if len(out) > scanned {
			index = make(map[string]int, 2*len(out))
			for j, t := range out {
				index[t.Topic] = j
			}
		}
	}
	return out
}
