package ledger

import (
	"context"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	events "orderlog/internal/event"
	"orderlog/proto/walpb"
)

// pendingEntry is an appended entry kept until every live store acked it
// and it is confirmed.
type pendingEntry struct {
	id      int64
	span    Span
	payload []byte
	topics  []TopicBytes
}

// Writer appends entries to one open ledger. It is the ledger's only
// writer: entries go to all W stores over pipelined AddEntries streams,
// are confirmed at A acks, and the LAC advances in entry order.
//
// Append, WaitConfirmed, LAC and Err are safe for concurrent use; Close
// is called once, and must be: it also stops the writer's goroutines.
type Writer struct {
	cli   *clientv3.Client
	meta  Metadata
	opts  WriterOptions
	links []*storeLink
	// localLink is the link to WriterOptions.LocalStore when OnLocalDurable
	// is set, else nil.
	localLink *storeLink
	ctx       context.Context
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	// notify wakes the confirm dispatcher (capacity 1, never blocks a sender).
	notify chan struct{}

	mu struct {
		sync.Mutex
		tracker *lacTracker
		// retained[i].id == retained[0].id + i; it holds every entry not yet
		// both confirmed and acked by every live store.
		retained []pendingEntry
		// lastSpanEnd is the end of the last non-empty span appended.
		lastSpanEnd uint64
		// confirmedFirst/End is the hull of non-empty spans of entries <= LAC.
		confirmedFirst, confirmedEnd uint64
		// confirmedBytes is the payload bytes of entries <= LAC, and
		// confirmedTopics what each topic's messages take in them.
		confirmedBytes      int64
		confirmedTopics     topicCounts
		hasConfirmedOffsets bool
		// reported is the last LAC given to OnConfirm.
		reported int64
		// reportedLocal is the last entry given to OnLocalDurable.
		reportedLocal int64
		closing       bool
		// frozen is what the first Close froze; a Close that failed is
		// retried with it (the writer cannot be unfrozen).
		frozen frozenClose
		closed bool // a Close succeeded
		err    error
		// lacChanged is closed and replaced when the LAC advances or err is set.
		lacChanged chan struct{}
	}
	// space is signalled when in-flight entries drop or the writer stops.
	space *sync.Cond
}

// storeLink is the writer's connection state for one ensemble member.
type storeLink struct {
	index  int
	member Member
	client walpb.WALClient
	wake   chan struct{} // capacity 1: new entries to send
	// Guarded by Writer.mu:
	ackedThrough int64     // highest entry acked; the store holds a dense prefix
	lastProgress time.Time // last ack, or when the link fell behind
	failed       error     // permanent: the store can no longer take this ledger
}

func startWriter(cli *clientv3.Client, m Metadata, clients []walpb.WALClient, o WriterOptions) *Writer {
	o.Events.EnsureDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	w := &Writer{cli: cli, meta: m, opts: o, ctx: ctx, cancel: cancel, notify: make(chan struct{}, 1)}
	w.mu.tracker = newLACTracker(m.A)
	w.mu.lacChanged = make(chan struct{})
	w.mu.reported, w.mu.reportedLocal = -1, -1
	w.space = sync.NewCond(&w.mu.Mutex)
	now := time.Now()
	for i, c := range clients {
		w.links = append(w.links, &storeLink{index: i, member: m.Ensemble[i], client: c,
			wake: make(chan struct{}, 1), ackedThrough: -1, lastProgress: now})
	}
	for _, l := range w.links {
		if o.OnLocalDurable != nil && l.member.StoreID == o.LocalStore {
			w.localLink = l
		}
		w.wg.Add(1)
		go w.runLink(l)
	}
	w.wg.Add(2)
	go w.dispatchConfirms()
	go w.monitor()
	return w
}

// Metadata is the ledger's metadata as created.
func (w *Writer) Metadata() Metadata { return w.meta }

// ID is the ledger id.
func (w *Writer) ID() uint64 { return w.meta.ID }

// Append queues one entry for all W stores and returns its id (dense from
// 0). It blocks while MaxInFlight entries are unconfirmed. Non-empty spans
// must not go backwards. It fails with ErrClosed after Close, ErrFenced once
// a store reported the ledger fenced, ErrQuorumLost when fewer than A stores
// can take writes.
func (w *Writer) Append(payload []byte, span Span) (int64, error) {
	return w.AppendCounted(payload, span, nil)
}

// AppendCounted is Append of an entry whose messages take topics' bytes;
// the close records the confirmed entries' sums (Metadata.TopicBytes).
func (w *Writer) AppendCounted(payload []byte, span Span, topics []TopicBytes) (int64, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for !w.mu.closing && w.mu.err == nil && w.mu.tracker.inFlight() >= int64(w.opts.MaxInFlight) {
		w.space.Wait()
	}
	switch {
	case w.mu.closing:
		return -1, ErrClosed
	case w.mu.err != nil:
		return -1, w.mu.err
	case !span.Empty() && span.First < w.mu.lastSpanEnd:
		return -1, fmt.Errorf("%w: [%d, %d) after end %d", ErrSpanOrder, span.First, span.End, w.mu.lastSpanEnd)
	}
	if !span.Empty() {
		w.mu.lastSpanEnd = span.End
	}
	id := w.mu.tracker.add()
	w.mu.retained = append(w.mu.retained, pendingEntry{id: id, span: span, payload: payload, topics: topics})
	now := time.Time{}
	for _, l := range w.links {
		if l.ackedThrough == id-1 { // the link was idle: its wait starts now
			if now.IsZero() {
				now = time.Now()
			}
			l.lastProgress = now
		}
		select {
		case l.wake <- struct{}{}:
		default:
		}
	}
	return id, nil
}

// LAC is the last add confirmed: every entry up to it is held by A stores.
func (w *Writer) LAC() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.mu.tracker.lac
}

// Err is the writer's sticky failure (ErrFenced, ErrQuorumLost), or nil.
func (w *Writer) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.mu.err
}

// LostMember is why the first ensemble member dropped out of the ledger
// for good (a wiped store's new incarnation, a store refusing the ledger
// for journal damage, a conflict, a lag beyond MaxRetained), or nil while
// every member can still take it. The writer goes on at the ack quorum
// without it, but the entries from then on have one copy fewer, and a
// recovery must hear from W−A+1 members that can still answer for the
// ledger: the owner rolls such a ledger onto a new ensemble (DESIGN §4)
// instead of writing to it until the next fault. A member that is only
// silent (dead, paused) is not lost: a new ensemble would likely hold it
// again while it is registered, and the ledger rolled for nothing, over
// and over; it catches up when it comes back.
func (w *Writer) LostMember() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, l := range w.links {
		if l.failed != nil {
			return l.failed
		}
	}
	return nil
}

// WaitConfirmed blocks until entry is confirmed (LAC ≥ entry), the writer
// fails or closes, or ctx ends.
func (w *Writer) WaitConfirmed(ctx context.Context, entry int64) error {
	for {
		w.mu.Lock()
		lac, err, closing, ch := w.mu.tracker.lac, w.mu.err, w.mu.closing, w.mu.lacChanged
		w.mu.Unlock()
		switch {
		case lac >= entry:
			return nil
		case err != nil:
			return err
		case closing:
			return ErrClosed
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// failLocked records the writer's first failure and wakes every waiter.
func (w *Writer) failLocked(err error) {
	if w.mu.err != nil {
		return
	}
	w.mu.err = err
	w.opts.Events.WriterFailed(events.WriterFailure{Ledger: w.meta.ID, Epoch: uint64(w.meta.Epoch),
		Writer: w.meta.WriterIncarnation, LAC: w.mu.tracker.lac, Err: err})
	w.space.Broadcast()
	close(w.mu.lacChanged)
	w.mu.lacChanged = make(chan struct{})
}

// onAckLocked counts one store's ack and, when the LAC advances, extends the
// confirmed offset hull and wakes waiters and the dispatcher.
func (w *Writer) onAckLocked(l *storeLink, entry int64) {
	l.lastProgress = time.Now()
	before := w.mu.tracker.lac
	// A store holds a dense prefix of the ledger (it refuses gaps), so its
	// ack of entry is an ack of every entry before it too. Crediting the
	// prefix matters when an earlier reply was lost with a broken stream
	// while a later one arrived (replies can be reordered), since the
	// stream is resent only from ackedThrough+1.
	advanced := false
	for id := max(l.ackedThrough+1, before+1); id <= entry; id++ {
		advanced = w.mu.tracker.ack(l.index, id) || advanced
	}
	if l == w.localLink && entry > l.ackedThrough {
		select {
		case w.notify <- struct{}{}:
		default:
		}
	}
	l.ackedThrough = max(l.ackedThrough, entry)
	if advanced {
		base := w.mu.retained[0].id
		for id := before + 1; id <= w.mu.tracker.lac; id++ {
			w.mu.confirmedBytes += int64(len(w.mu.retained[id-base].payload))
			w.mu.confirmedTopics.add(w.mu.retained[id-base].topics)
			if s := w.mu.retained[id-base].span; !s.Empty() {
				if !w.mu.hasConfirmedOffsets {
					w.mu.confirmedFirst = s.First
					w.mu.hasConfirmedOffsets = true
				}
				w.mu.confirmedEnd = s.End
			}
		}
		close(w.mu.lacChanged)
		w.mu.lacChanged = make(chan struct{})
		w.space.Broadcast()
		select {
		case w.notify <- struct{}{}:
		default:
		}
	}
	w.releaseLocked()
}

// releaseLocked drops retained entries that are confirmed and acked by
// every live store, and drops from the ledger a store lagging beyond
// MaxRetained.
func (w *Writer) releaseLocked() {
	for {
		bound := w.mu.tracker.lac
		var slowest *storeLink
		for _, l := range w.links {
			if l.failed == nil && l.ackedThrough < bound {
				bound = l.ackedThrough
				slowest = l
			}
		}
		n := 0
		if len(w.mu.retained) > 0 {
			n = int(min(bound-w.mu.retained[0].id+1, int64(len(w.mu.retained))))
		}
		if n > 0 {
			w.recyclePayloadsLocked(w.mu.retained[:n])
			w.mu.retained = w.mu.retained[n:]
		}
		if len(w.mu.retained) <= w.opts.MaxRetained || slowest == nil {
			return
		}
		slowest.failed = fmt.Errorf("store %s lags more than %d entries", slowest.member.StoreID, w.opts.MaxRetained)
		w.checkQuorumLocked(time.Now())
	}
}

// recyclePayloadsLocked hands ReleasePayload the payloads of released
// entries that every link acked. An ack comes after the store received the
// whole frame (over gRPC, after Send marshalled it; in process, after the
// store copied it into its journal), and a link never resends an acked
// entry, so nothing refers to those payloads any more. A dropped store's
// link may still be sending what it never acked: those are left to the
// garbage collector.
func (w *Writer) recyclePayloadsLocked(released []pendingEntry) {
	if w.opts.ReleasePayload == nil {
		return
	}
	everyLink := released[len(released)-1].id
	for _, l := range w.links {
		everyLink = min(everyLink, l.ackedThrough)
	}
	for i := range released {
		if released[i].id <= everyLink {
			w.opts.ReleasePayload(released[i].payload)
		}
		released[i].payload = nil
	}
}

// checkQuorumLocked fails the writer with ErrQuorumLost when more than
// W−A stores are failed or unreachable.
func (w *Writer) checkQuorumLocked(now time.Time) {
	down := 0
	for _, l := range w.links {
		behind := l.ackedThrough < w.mu.tracker.next-1
		if l.failed != nil || (behind && now.Sub(l.lastProgress) > w.opts.UnreachableAfter) {
			down++
		}
	}
	if down > w.meta.W-w.meta.A {
		w.failLocked(ErrQuorumLost)
	}
}

// monitor periodically applies the unreachability rule.
func (w *Writer) monitor() {
	defer w.wg.Done()
	t := time.NewTicker(max(w.opts.UnreachableAfter/4, time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-w.ctx.Done():
			return
		case now := <-t.C:
			w.mu.Lock()
			if !w.mu.closing {
				w.checkQuorumLocked(now)
			}
			w.mu.Unlock()
		}
	}
}

// dispatchConfirms calls OnConfirm with each new LAC, in order. The LAC
// stops moving at freeze, so nothing beyond the frozen LAC is ever reported.
func (w *Writer) dispatchConfirms() {
	defer w.wg.Done()
	for {
		select {
		case <-w.ctx.Done():
			return
		case <-w.notify:
		}
		w.reportConfirmed()
	}
}

// reportConfirmed gives OnLocalDurable the local store's progress and
// OnConfirm the current LAC, each if it moved. Only the dispatcher calls it,
// and Close after the dispatcher stopped, so calls never overlap.
func (w *Writer) reportConfirmed() {
	w.mu.Lock()
	lac := w.mu.tracker.lac
	moved := lac > w.mu.reported
	w.mu.reported = max(w.mu.reported, lac)
	local, localMoved := w.localDurableLocked()
	w.mu.Unlock()
	if localMoved {
		w.opts.OnLocalDurable(local)
	}
	if moved && w.opts.OnConfirm != nil {
		w.opts.OnConfirm(lac)
	}
}

// localDurableLocked returns the local store's acked prefix if it moved
// since the last report (never once Close began).
func (w *Writer) localDurableLocked() (int64, bool) {
	l := w.localLink
	if l == nil || w.mu.closing || w.mu.err != nil || l.failed != nil || l.ackedThrough <= w.mu.reportedLocal {
		return 0, false
	}
	w.mu.reportedLocal = l.ackedThrough
	return l.ackedThrough, true
}
