package ledger

import (
	"context"
	"fmt"
	"time"

	"orderlog/proto/walpb"
)

// Close closes the ledger at the writer's LAC. It freezes the LAC first and
// ignores every ack after, so nothing beyond the recorded last entry was
// ever reported confirmed. Then it CASes open → closed with that last entry
// and the covered offset range. If a recovery got there first (state
// recovering or closed), Close waits for the recovered metadata and returns
// it: its LastEntry is ≥ the writer's LAC, and the caller may acknowledge
// entries up to it. Close also tells the stores, best effort, so they drop
// entries beyond the last.
//
// A Close that fails (etcd unreachable, or a recovery that outlasts ctx)
// may be called again: it finishes the close with what the first call
// froze. Once one has succeeded, Close returns ErrClosed.
func (w *Writer) Close(ctx context.Context) (Metadata, error) {
	w.mu.Lock()
	if w.mu.closed {
		w.mu.Unlock()
		return Metadata{}, ErrClosed
	}
	firstCall := !w.mu.closing
	if firstCall {
		w.mu.closing = true
		w.mu.frozen = frozenClose{last: w.mu.tracker.freeze(), first: w.mu.confirmedFirst, end: w.mu.confirmedEnd,
			bytes: w.mu.confirmedBytes, topics: w.mu.confirmedTopics.clone()}
		w.space.Broadcast()
	}
	frozen := w.mu.frozen
	w.mu.Unlock()

	if firstCall {
		w.cancel()
		w.wg.Wait()
		w.reportConfirmed() // the dispatcher may have stopped before the last advance
	}
	final, err := w.finishClose(ctx, frozen)
	if err == nil {
		w.mu.Lock()
		w.mu.closed = true
		w.mu.Unlock()
	}
	return final, err
}

// frozenClose is the writer's confirmed state at the moment Close froze it.
type frozenClose struct {
	last       int64
	first, end uint64
	bytes      int64
	topics     map[string]int64
}

// finishClose records the close in etcd (or waits for the recovery that got
// there first) and tells the stores.
func (w *Writer) finishClose(ctx context.Context, frozen frozenClose) (Metadata, error) {
	last, first, end := frozen.last, frozen.first, frozen.end
	cur, err := Get(ctx, w.cli, w.meta.ID)
	if err != nil {
		return Metadata{}, err
	}
	final, _, err := transition(ctx, w.cli, cur, StateOpen, func(m Metadata) Metadata {
		m.State, m.LastEntry, m.FirstOffset, m.EndOffset = StateClosed, last, first, end
		m.Bytes, m.TopicBytes, m.ClosedAt = frozen.bytes, frozen.topics, time.Now().UnixMilli()
		return m
	})
	if err != nil {
		return Metadata{}, err
	}
	if final.State != StateClosed {
		if final, err = waitClosed(ctx, w.cli, w.meta.ID); err != nil {
			return Metadata{}, fmt.Errorf("wait for recovery of ledger %d: %w", w.meta.ID, err)
		}
	}
	if final.LastEntry < last {
		// Impossible under §4: recovery rolls forward every confirmed entry.
		return final, fmt.Errorf("ledger %d closed at %d below the writer's confirmed %d", w.meta.ID, final.LastEntry, last)
	}
	closeOnStores(ctx, final, w.clients())
	return final, nil
}

func (w *Writer) clients() []walpb.WALClient {
	clients := make([]walpb.WALClient, len(w.links))
	for i, l := range w.links {
		clients[i] = l.client
	}
	return clients
}

// closeOnStores tells every ensemble store the ledger's last entry, so it
// drops anything beyond, and waits for the answers only until a fence
// quorum has them. Best effort: the metadata is the truth, and a store
// that misses this still holds nothing a reader is ever sent to; a paused
// member is not waited for (each call still ends within a second).
func closeOnStores(ctx context.Context, m Metadata, clients []walpb.WALClient) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	answered, quorum := 0, min(len(clients), fenceQuorum(m.W, m.A))
	askAll(len(clients), nil, func(i int) bool {
		_, err := clients[i].CloseLedger(ctx, &walpb.CloseLedgerRequest{
			LedgerId: m.ID, StoreIncarnation: m.Ensemble[i].Incarnation, LastEntry: m.LastEntry,
		})
		return err == nil
	}, func(_ int, ok bool) bool {
		if ok {
			answered++
		}
		return answered >= quorum
	})
	time.AfterFunc(time.Second, cancel) // the calls not waited for end by then
}

// Unconfirmed returns, after Close, the entries the writer appended beyond
// the closed ledger's last entry, in id order, so the caller can move them
// to a new ledger (ingest re-grants their messages, whose offsets were
// granted for this ledger only; the sequencer re-appends its commit
// records). Entries ≤ last are in the ledger.
func (w *Writer) Unconfirmed(last int64) []Entry {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []Entry
	for _, e := range w.mu.retained {
		if e.id > last {
			out = append(out, Entry{ID: e.id, Span: e.span, Payload: e.payload})
		}
	}
	return out
}
