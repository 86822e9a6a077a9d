package ingest

import (
	"context"
	"slices"
	"sync"
	"time"

	"orderlog/ingest/batch"
	"orderlog/ingest/ledger"
	"orderlog/ingest/pipeline"
	"orderlog/ingest/producer"
	"orderlog/internal/grpcopt"
)

// retryPause is the pause before retrying a failed etcd or ledger operation.
const retryPause = 200 * time.Millisecond

// refusalPause is how long a new ledger waits after refused grants in a
// row: none after none, then retryPause doubling up to 2 s. While no
// sequencer grants (none is up, or one is taking over) every refusal closes
// the ledger, and reopening at once created hundreds of ledgers a second,
// each with its etcd records and producer snapshot.
func refusalPause(refusedInARow int) time.Duration {
	if refusedInARow == 0 {
		return 0
	}
	return min(retryPause<<min(refusedInARow-1, 4), 2*time.Second)
}

// openLedger creates a ledger of the sequencer's current epoch in the
// background and writes the producer-table snapshot as its entry 0 before
// any batch (DESIGN.md §6).
func (n *Node) openLedger() {
	snapshot := n.withKeys(n.table.Snapshot())
	epoch := n.grants.Epoch()
	pause := refusalPause(n.refusedInARow)
	n.async(func() {
		if pause > 0 {
			select {
			case <-time.After(pause):
			case <-n.stop:
				return
			}
		}
		w, err := n.createLedger(epoch, snapshot)
		if err != nil {
			n.metrics.ledgerErrors.Inc()
			n.ledgerErrors.report(n.cfg.Logf, err)
			select {
			case <-time.After(retryPause):
			case <-n.stop:
				return
			}
			n.do(n.pipe.LedgerOpenFailed)
			return
		}
		if !n.do(func() { n.ledgerOpened(w, snapshot) }) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, _ = w.Close(ctx)
			cancel()
		}
	})
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

func (r *repeatedError) report(logf func(string, ...any), err error) {
	if logf == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if text := err.Error(); text != r.last || time.Since(r.logged) >= repeatedErrorEvery {
		r.last, r.logged = text, time.Now()
		logf("ingest: cannot open a ledger (retrying): %v", err)
	}
}

func (n *Node) createLedger(epoch int64, snapshot []producer.State) (*ledger.Writer, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	members, err := n.ensemble(ctx, n.cfg.W)
	if err != nil {
		return nil, err
	}
	var ledgerID uint64 // set before the first entry can be confirmed
	opts := ledger.WriterOptions{OnConfirm: func(lac int64) {
		id := ledgerID
		n.do(func() { n.onConfirmed(id, lac) })
	}, ReleasePayload: grpcopt.PutBuffer}
	if n.cfg.AckMode == AckLeader && n.cfg.LocalStore != "" {
		opts.LocalStore = n.cfg.LocalStore
		opts.OnLocalDurable = func(entry int64) {
			id := ledgerID
			n.do(func() { n.onLocalDurable(id, entry) })
		}
	}
	w, err := ledger.Create(ctx, n.etcd, ledger.CreateOptions{
		Epoch: epoch, WriterIncarnation: n.incarnation, Ensemble: members,
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

// ledgerOpened starts using w, whose entry 0 holds snapshot. A producer
// waiting for a durable snapshot has it in entry 0 if it was settled when
// the snapshot was taken; one settled since gets an entry of its own.
func (n *Node) ledgerOpened(w *ledger.Writer, snapshot []producer.State) {
	n.writer = w
	n.pipe.LedgerOpened(w.ID())
	n.metrics.ledgersOpened.Inc()
	inEntry0 := make(map[uint64]bool, len(snapshot))
	for _, st := range snapshot {
		inEntry0[st.ID] = true
	}
	for id, s := range n.producers {
		switch {
		case !s.settled || s.snapshotEntry != snapshotInNextLedger:
		case inEntry0[id]:
			s.snapshotLedger, s.snapshotEntry = w.ID(), 0
		default:
			n.writeSnapshot(id, s)
		}
	}
	// Entry 0 may have been confirmed before this ran (onConfirmed then
	// had no writer and dropped it), and the writer reports a LAC once.
	n.snapshotsDurable(w.ID(), w.LAC())
}

// appendBatches writes granted batches as entries of the open ledger, in
// order. A batch of another ledger (one being closed) is skipped: its grant
// is reported Unused when that ledger has closed.
func (n *Node) appendBatches(batches []*pipeline.Batch) {
	for _, b := range batches {
		if n.writer == nil || n.writer.ID() != b.Ledger {
			continue
		}
		payload, err := n.encodeBatch(b)
		if err != nil {
			panic("ingest: batch does not encode: " + err.Error()) // the pipeline built it: a bug
		}
		entry, err := n.writer.Append(payload, ledger.Span{First: b.First, End: b.First + uint64(len(b.Messages))})
		if err != nil {
			n.failLedger()
			return
		}
		if err := n.pipe.Appended(b.ID, entry); err != nil {
			panic("ingest: " + err.Error())
		}
		b.AppendedAt = time.Now()
		for _, m := range b.Messages {
			m.Payload.(*messageRef).frame.times.appended = b.AppendedAt
		}
		n.metrics.appendWait.Observe(b.AppendedAt.Sub(b.Messages[0].Payload.(*messageRef).frame.arrived).Seconds())
		n.metrics.batchMessages.Observe(float64(len(b.Messages)))
		n.metrics.appendedBytes.Add(float64(len(payload)))
	}
}

func (n *Node) onConfirmed(ledgerID uint64, lac int64) {
	if n.writer == nil || n.writer.ID() != ledgerID {
		return // a failing ledger: LedgerClosed decides its entries
	}
	n.pipe.Confirmed(ledgerID, lac)
	n.snapshotsDurable(ledgerID, lac)
}

// onLocalDurable hands the pipeline this node's own store's progress (ack
// mode leader).
func (n *Node) onLocalDurable(ledgerID uint64, entry int64) {
	if n.writer == nil || n.writer.ID() != ledgerID {
		return
	}
	n.pipe.LocallyDurable(ledgerID, entry)
}

// checkWriter notices a writer that failed without an append to tell.
func (n *Node) checkWriter() {
	if n.writer != nil && n.writer.Err() != nil {
		n.failLedger()
	}
}

// failLedger closes the open ledger at its LAC (DESIGN.md §3 step 6): the
// writer freezes its LAC before the close, and everything beyond the last
// entry read back is granted again into a new ledger.
func (n *Node) failLedger() {
	w := n.writer
	if w == nil {
		return
	}
	n.writer = nil
	id := w.ID()
	n.pipe.LedgerFailing(id)
	n.async(func() {
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			meta, err := w.Close(ctx)
			cancel()
			if err == nil {
				n.do(func() { n.ledgerClosed(id, meta.LastEntry) })
				return
			}
			select {
			case <-time.After(retryPause):
			case <-n.stop:
				return
			}
		}
	})
}

func (n *Node) ledgerClosed(id uint64, last int64) {
	n.grants.LedgerClosed(id)
	n.pipe.LedgerClosed(id, last)
	n.snapshotsDurable(id, last)
	for _, s := range n.producers {
		if s.settled && s.snapshotLedger == id && s.snapshotEntry > last {
			s.snapshotLedger, s.snapshotEntry = 0, snapshotInNextLedger
			n.pipe.WantLedger()
		}
	}
}

// CloseLedgerRequested is called when the sequencer asks this node to close
// a ledger (a grant lease expired, or a new leader took over).
func (n *Node) CloseLedgerRequested(ledgerID uint64) {
	n.do(func() {
		if n.writer != nil && n.writer.ID() == ledgerID {
			n.failLedger()
		}
	})
}

func (n *Node) onGrantReply(r GrantReply) {
	if asked, ok := n.grantAsked[r.BatchID]; ok {
		n.metrics.grantLatency.Observe(time.Since(asked).Seconds())
		delete(n.grantAsked, r.BatchID)
	}
	if r.Err != nil {
		n.pipe.GrantRefused(r.BatchID)
		n.metrics.grantRefusals.Inc()
		n.refusedInARow++
		if n.writer != nil && n.writer.ID() == r.Ledger {
			n.failLedger()
		}
		return
	}
	n.metrics.grants.Inc()
	n.refusedInARow = 0
	if err := n.pipe.Granted(r.BatchID, r.First); err != nil {
		panic("ingest: " + err.Error())
	}
}

// encodeBatch builds the entry payload of a granted batch. The records and
// runs are scratch space of the loop goroutine, reused batch after batch:
// Encode copies everything into the payload.
func (n *Node) encodeBatch(b *pipeline.Batch) ([]byte, error) {
	records := slices.Grow(n.scratch.records[:0], len(b.Messages))[:len(b.Messages)]
	runs := n.scratch.runs[:0]
	defer func() {
		clear(records) // keep no message alive through the scratch space
		n.scratch.records, n.scratch.runs = records[:0], runs[:0]
	}()
	for i, m := range b.Messages {
		records[i] = m.Payload.(*messageRef).record
		last := len(runs) - 1
		if last >= 0 && runs[last].ProducerID == m.ProducerID && runs[last].Epoch == m.Epoch &&
			(m.ProducerID == 0 || runs[last].FirstSeq+uint64(runs[last].Count) == m.Seq) {
			runs[last].Count++
			continue
		}
		runs = append(runs, batch.ProducerRun{ProducerID: m.ProducerID, Epoch: m.Epoch, FirstSeq: m.Seq, Count: 1})
	}
	header := batch.Header{Kind: batch.KindRecords, FirstOffset: b.First, Count: uint32(len(records)),
		IngestTimeMicros: time.Now().UnixMicro(), Runs: runs}
	// The payload comes from the shared buffer pool and goes back to it
	// once every store acked it (the writer's ReleasePayload): a fresh
	// buffer per batch was 40 % of the bytes the write path allocated at
	// 170k msg/s, and the collector cycles it drove showed in the p99.
	return batch.Encode(grpcopt.GetBuffer(batch.EncodedSizeBound(header, records)), header, records)
}
