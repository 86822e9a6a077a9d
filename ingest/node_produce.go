package ingest

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"orderlog/ingest/batch"
	"orderlog/ingest/httpapi"
	"orderlog/ingest/ledger"
	"orderlog/ingest/pipeline"
	"orderlog/ingest/producer"
	"orderlog/internal/apierr"
	"orderlog/proto/orderlogpb"
)

// spanNone is the span of entries that carry no offsets (snapshots).
var spanNone = ledger.Span{}

// Produce queues one frame; answer is called exactly once, from the node's
// loop goroutine, when every message of the frame is logged (or the frame
// is refused). It must not block.
func (n *Node) Produce(req *orderlogpb.ProduceRequest, answer func(*orderlogpb.ProduceResponse)) {
	n.ProduceFromBuffer(req, nil, answer)
}

// ProduceFromBuffer is Produce for a request whose bytes fields alias a
// receive buffer: release (if not nil) is called once, on the node's loop
// goroutine, when the frame is answered and none of its messages is waiting
// to be logged any more — or never, if the node stops first.
func (n *Node) ProduceFromBuffer(req *orderlogpb.ProduceRequest, release func(), answer func(*orderlogpb.ProduceResponse)) {
	var f *frame
	f = newFrame(req, func(resp *orderlogpb.ProduceResponse) {
		n.metrics.observeFrame(resp, f)
		answer(resp)
	})
	f.release = release
	if err := n.validate(req); err != nil {
		f.refuse(err)
		return
	}
	if !n.do(func() { n.produce(f) }) {
		f.refuse(apierr.New(apierr.Unavailable, "ingest node is shutting down"))
	}
}

// ProduceSync is Produce for callers that want to wait (the HTTP API).
func (n *Node) ProduceSync(ctx context.Context, req *orderlogpb.ProduceRequest) ([]*orderlogpb.Ack, error) {
	done := make(chan *orderlogpb.ProduceResponse, 1)
	n.Produce(req, func(resp *orderlogpb.ProduceResponse) { done <- resp })
	select {
	case resp := <-done:
		if resp.ErrorCode != "" {
			err := &apierr.Error{Code: apierr.Code(resp.ErrorCode), Message: resp.ErrorMessage}
			if err.Code == apierr.OutOfOrderSequence { // 0 is an expected seq too
				err = err.With("expected_seq", strconv.FormatUint(resp.ExpectedSeq, 10))
			}
			return nil, err
		}
		return resp.Acks, nil
	case <-ctx.Done():
		return nil, apierr.New(apierr.Timeout, "no answer yet; retry with the same producer seq: %v", ctx.Err())
	}
}

// validate refuses frames that break the limits, before anything is queued.
func (n *Node) validate(req *orderlogpb.ProduceRequest) error {
	switch {
	case len(req.Messages) == 0:
		return apierr.New(apierr.InvalidArgument, "a produce frame needs at least one message")
	case len(req.Messages) > n.cfg.MaxFrameMessages:
		return apierr.New(apierr.BatchTooLarge, "%d messages exceed the frame limit %d", len(req.Messages), n.cfg.MaxFrameMessages)
	case req.ProducerId == 0 && (req.Epoch != 0 || req.FirstSeq != 0):
		return apierr.New(apierr.InvalidArgument, "epoch and first_seq need a producer_id")
	case req.ProducerId != 0 && req.Epoch == 0: // InitProducer's epochs start at 1
		return apierr.New(apierr.InvalidArgument, "a producer_id needs the epoch InitProducer gave it")
	case req.IdempotencyKey != "":
		if err := validateIdempotencyKey(req); err != nil {
			return err
		}
	}
	for i, m := range req.Messages {
		if len(m.Value) > n.cfg.MaxMessageBytes {
			return apierr.New(apierr.MessageTooLarge, "message %d: %d bytes exceed %d", i, len(m.Value), n.cfg.MaxMessageBytes)
		}
		if size := metadataBytes(m); size > MaxMetadataBytes {
			return apierr.New(apierr.MessageTooLarge, "message %d: key, headers and message id of %d bytes exceed %d", i, size, MaxMetadataBytes)
		}
		if err := httpapi.ValidateTopicName(m.Topic); err != nil {
			return err
		}
	}
	return nil
}

// MaxMetadataBytes bounds what one message carries besides its value: its
// key, its headers' keys and values, and its message id. Without a bound a
// reader's page, which holds whole messages, could not be kept under
// gRPC's message limit.
const MaxMetadataBytes = 64 << 10

// metadataBytes is what a message's key, headers and message id take in a
// batch, a few bytes of framing per header included (so that many empty
// headers count too).
func metadataBytes(m *orderlogpb.Message) int {
	const headerFraming = 4
	size := len(m.Key) + len(m.MessageId)
	for _, h := range m.Headers {
		size += len(h.Key) + len(h.Value) + headerFraming
	}
	return size
}

// recordBytes is what a message adds to a batch, near enough (docs/format/
// batch.md): the batch byte limit counts it all, or batches of small
// values with big keys grew past what a ledger entry may hold.
func recordBytes(m *orderlogpb.Message) int {
	const recordFraming = 32
	return len(m.Value) + len(m.Topic) + metadataBytes(m) + recordFraming
}

func (n *Node) produce(f *frame) {
	f.times.queued = time.Now()
	req := f.request
	n.noteTopics(req.Messages)
	if req.IdempotencyKey != "" {
		n.produceKeyed(f)
		return
	}
	if req.ProducerId == 0 { // at-least-once: no sequence check, no dedup
		refs := make([]messageRef, len(req.Messages))
		for i, m := range req.Messages {
			refs[i] = messageRef{frame: f, index: i, record: batch.FromProto(m)}
			n.pipe.Add(pipeline.Message{Size: recordBytes(m), Payload: &refs[i]})
			f.unlogged++
		}
		return
	}
	s := n.session(req.ProducerId, req.Epoch)
	if !s.ready {
		s.held = append(s.held, f)
		return
	}
	n.produceOwned(f)
}

// produceOwned checks a frame of a ready producer against its sequence
// state, answers duplicates and queues the new messages.
func (n *Node) produceOwned(f *frame) {
	req := f.request
	decision, err := n.table.Check(req.ProducerId, req.Epoch, req.FirstSeq, len(req.Messages))
	if err != nil {
		var refusal *producer.RefusalError
		if errors.As(err, &refusal) {
			err = refusalError(refusal)
		}
		f.refuse(err)
		return
	}
	refs := make([]messageRef, len(req.Messages)) // one allocation for the frame's messages
	for i, m := range req.Messages {
		seq := req.FirstSeq + uint64(i)
		if seq >= decision.AcceptFrom {
			refs[i] = messageRef{frame: f, index: i, record: batch.FromProto(m)}
			n.pipe.Add(pipeline.Message{ProducerID: req.ProducerId, Epoch: req.Epoch, Seq: seq, Size: recordBytes(m),
				Payload: &refs[i]})
			f.unlogged++
			continue
		}
		switch verdict, offset := n.table.Lookup(req.ProducerId, seq); verdict {
		case producer.Duplicate:
			f.ack(i, &orderlogpb.Ack{Offset: offset, Duplicate: true})
		case producer.DuplicateWithoutOffset:
			f.ack(i, &orderlogpb.Ack{Duplicate: true, DuplicateWithoutOffset: true})
		default: // in flight: answer when it is logged
			key := seqKey{req.ProducerId, seq}
			n.dupWaiters[key] = append(n.dupWaiters[key], ackTarget{f, i})
		}
	}
}

// ackEarly tells producers the offsets of a batch this node's own store
// fsynced (ack mode leader). Producer state moves only when it is logged;
// its later acks find the messages answered and change nothing.
func (n *Node) ackEarly(b *pipeline.Batch) {
	for i, m := range b.Messages {
		ref := m.Payload.(*messageRef)
		ref.frame.ackOffset(ref.index, b.First+uint64(i))
	}
}

// logged acknowledges a durable batch and advances producer state.
func (n *Node) logged(b *pipeline.Batch) {
	now := time.Now()
	if !b.AppendedAt.IsZero() {
		n.metrics.confirmLatency.Observe(now.Sub(b.AppendedAt).Seconds())
	}
	for start := 0; start < len(b.Messages); {
		m := b.Messages[start]
		end := start + 1
		for end < len(b.Messages) && b.Messages[end].ProducerID == m.ProducerID && b.Messages[end].Seq == b.Messages[end-1].Seq+1 {
			end++
		}
		if m.ProducerID != 0 {
			offsets := make([]uint64, end-start)
			for i := range offsets {
				offsets[i] = b.First + uint64(start+i)
			}
			if err := n.table.Durable(m.ProducerID, m.Seq, offsets); err != nil {
				panic("ingest: " + err.Error()) // the pipeline keeps producer order: a bug
			}
		}
		start = end
	}
	for i, m := range b.Messages {
		offset := b.First + uint64(i)
		ref := m.Payload.(*messageRef)
		ref.frame.unlogged--
		ref.frame.times.confirmed = now
		ref.frame.ackOffset(ref.index, offset)
		if m.ProducerID == 0 {
			continue
		}
		n.keyLogged(m.ProducerID, m.Seq, offset)
		key := seqKey{m.ProducerID, m.Seq}
		for _, w := range n.dupWaiters[key] {
			w.frame.ack(w.index, &orderlogpb.Ack{Offset: offset, Duplicate: true})
		}
		delete(n.dupWaiters, key)
	}
	for _, m := range b.Messages {
		m.Payload.(*messageRef).frame.releaseIfDone()
	}
	n.metrics.loggedMessages.Add(float64(len(b.Messages)))
}

// InitProducer registers (or re-registers) a producer by name with this node
// as its owner, fencing older instances, and returns the session once its
// state is settled here, with the next seq to send.
func (n *Node) InitProducer(ctx context.Context, name string) (*orderlogpb.InitProducerResponse, error) {
	if err := checkProducerName(name); err != nil {
		return nil, err
	}
	return n.initProducer(ctx, name)
}

func (n *Node) initProducer(ctx context.Context, name string) (*orderlogpb.InitProducerResponse, error) {
	rec, _, err := registerProducer(ctx, n.etcd, name, n.incarnation)
	if err != nil {
		return nil, apierr.New(apierr.Unavailable, "register producer: %v", err)
	}
	readyErr := make(chan error, 1)
	keyed := strings.HasPrefix(name, reservedProducerPrefix+"idempotency.")
	if !n.do(func() { n.initSession(rec, keyed, func(err error) { readyErr <- err }) }) {
		return nil, apierr.New(apierr.Unavailable, "ingest node is shutting down")
	}
	select {
	case err := <-readyErr:
		if err != nil {
			return nil, err
		}
	case <-ctx.Done():
		return nil, apierr.New(apierr.Timeout, "producer %q not settled yet: %v", name, ctx.Err())
	}
	// Wait until the older instance's in-flight messages are logged, so the
	// new instance continues right after them.
	for {
		next := make(chan uint64, 1)
		if !n.do(func() {
			if n.table.InFlight(rec.ID) > 0 {
				next <- 0
				return
			}
			state, _ := n.table.Get(rec.ID)
			next <- state.DurableNext + 1 // +1 so that 0 means "not yet"
		}) {
			return nil, apierr.New(apierr.Unavailable, "ingest node is shutting down")
		}
		if v := <-next; v > 0 {
			return &orderlogpb.InitProducerResponse{ProducerId: rec.ID, Epoch: rec.Epoch, NextSeq: v - 1}, nil
		}
		select {
		case <-time.After(2 * time.Millisecond):
		case <-ctx.Done():
			return nil, apierr.New(apierr.Timeout, "producer %q still has messages in flight", name)
		}
	}
}

// initSession fences an owned producer at its new epoch, or takes it over.
func (n *Node) initSession(rec producerRecord, keyed bool, ready func(error)) {
	if s, ok := n.producers[rec.ID]; ok {
		s.epoch = max(s.epoch, rec.Epoch)
		n.table.Fence(rec.ID, rec.Epoch)
		if s.ready {
			ready(nil)
			return
		}
		s.onReady = append(s.onReady, ready)
		return
	}
	s := n.session(rec.ID, rec.Epoch)
	s.keyed = keyed
	s.onReady = append(s.onReady, ready)
}
