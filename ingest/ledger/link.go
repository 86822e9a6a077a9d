package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"

	"orderlog/proto/walpb"
)

// The writer's per-store loop: one AddEntries stream at a time, many
// entries in flight on it, several entries per frame. A broken stream is
// reopened and resent from the first entry the store has not acked; an
// identical re-append is acked again by the store, so resending is safe.

var (
	// errResync ends a stream whose store reported a gap: reopen and resend.
	errResync = errors.New("ledger: store needs resend")
	// errLinkStopped ends a stream because the writer closes or the store failed.
	errLinkStopped = errors.New("ledger: link stopped")
)

const (
	minReconnect = 5 * time.Millisecond
	maxReconnect = 500 * time.Millisecond
)

func (w *Writer) runLink(l *storeLink) {
	defer w.wg.Done()
	backoff := minReconnect
	for w.ctx.Err() == nil {
		sent, err := w.serveStream(l)
		if errors.Is(err, errLinkStopped) {
			return
		}
		if sent {
			backoff = minReconnect
		}
		select {
		case <-w.ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxReconnect)
	}
}

// serveStream runs one AddEntries stream until it breaks. sent reports
// whether any ack arrived on it (to reset the reconnect backoff).
func (w *Writer) serveStream(l *storeLink) (acked bool, err error) {
	streamCtx, cancel := context.WithCancel(w.ctx)
	defer cancel()
	stream, err := l.client.AddEntries(streamCtx)
	if err != nil {
		return false, err
	}
	recvDone := make(chan error, 1)
	progress := make(chan struct{}, 1)
	go func() { recvDone <- w.receive(l, stream, progress) }()

	w.mu.Lock()
	next := l.ackedThrough + 1
	w.mu.Unlock()
	for {
		frame, after, stop := w.nextFrame(l, next)
		if stop {
			_ = stream.CloseSend()
			return acked, errLinkStopped
		}
		if len(frame) == 0 {
			select {
			case <-l.wake:
				continue
			case <-progress:
				acked = true
				continue
			case err := <-recvDone:
				return acked, err
			case <-w.ctx.Done():
				return acked, errLinkStopped
			}
		}
		if err := stream.Send(&walpb.AddEntriesRequest{Entries: frame}); err != nil {
			// The real cause comes from Recv.
			return acked, <-recvDone
		}
		next = after
		select {
		case err := <-recvDone:
			return acked, err
		case <-progress:
			acked = true
		default:
		}
	}
}

// nextFrame builds the next frame for l starting at entry next. stop is
// true once the writer closes or failed for good, or the store failed.
func (w *Writer) nextFrame(l *storeLink, next int64) (frame []*walpb.AddEntry, after int64, stop bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.mu.closing || l.failed != nil || errors.Is(w.mu.err, ErrFenced) {
		return nil, next, true
	}
	if len(w.mu.retained) == 0 {
		return nil, next, false
	}
	base := w.mu.retained[0].id
	if next < base {
		// Entries the store never acked were released: only possible after
		// the store was dropped, which stops the link above.
		return nil, next, true
	}
	lac := w.mu.tracker.lac
	bytes := 0
	for id := next; id < w.mu.tracker.next && len(frame) < w.opts.MaxFrameEntries; id++ {
		e := w.mu.retained[id-base]
		if len(frame) > 0 && bytes+len(e.payload) > w.opts.MaxFrameBytes {
			break
		}
		bytes += len(e.payload)
		frame = append(frame, &walpb.AddEntry{
			LedgerId:         w.meta.ID,
			StoreIncarnation: l.member.Incarnation,
			EntryId:          id,
			Span:             e.span.proto(),
			Lac:              lac,
			Payload:          e.payload,
			RequestId:        uint64(id),
		})
		after = id + 1
	}
	if len(frame) == 0 {
		after = next
	}
	return frame, after, false
}

// receive applies results until the stream breaks or a result asks for a
// resend or ends the link.
func (w *Writer) receive(l *storeLink, stream walpb.WAL_AddEntriesClient, progress chan<- struct{}) error {
	for {
		resp, err := stream.Recv()
		if err != nil {
			return err
		}
		w.mu.Lock()
		for _, r := range resp.Results {
			if err = w.onResultLocked(l, r); err != nil {
				break
			}
		}
		w.mu.Unlock()
		if err != nil {
			return err
		}
		select {
		case progress <- struct{}{}:
		default:
		}
	}
}

// onResultLocked applies one store result. Acks after freeze are ignored by
// the tracker.
func (w *Writer) onResultLocked(l *storeLink, r *walpb.AddResult) error {
	if r.LedgerId != w.meta.ID {
		return nil
	}
	switch r.Code {
	case walpb.AddCode_ADD_OK:
		w.onAckLocked(l, r.EntryId)
		return nil
	case walpb.AddCode_ADD_FENCED, walpb.AddCode_ADD_BEYOND_CLOSE:
		w.failLocked(ErrFenced)
		return errLinkStopped
	case walpb.AddCode_ADD_GAP, walpb.AddCode_ADD_STORE_FAILED:
		return errResync
	default: // ADD_WRONG_INCARNATION, ADD_CONFLICT, ADD_DAMAGED: this store is out for good.
		l.failed = fmt.Errorf("store %s: %s: %s", l.member.StoreID, r.Code, r.Message)
		w.checkQuorumLocked(time.Now())
		return errLinkStopped
	}
}
