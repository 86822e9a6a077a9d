package ingest

import (
	"context"
	"strconv"
	"time"

	"orderlog/ingest/coordinator"
	"orderlog/ingest/httpapi"
	"orderlog/internal/apierr"
	"orderlog/proto/orderlogpb"
)

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
	f = newFrame(req, release, func(resp *orderlogpb.ProduceResponse) {
		n.metrics.observeFrame(resp, f)
		answer(resp)
	})
	if err := n.validate(req); err != nil {
		f.refuse(err)
		return
	}
	if err := n.admit(len(req.Messages)); err != nil { // before the frame reaches the pipeline
		f.refuse(err)
		return
	}
	if !n.do(func() { n.produce(f) }) {
		f.refuse(apierr.New(apierr.Unavailable, "ingest node is shutting down"))
	}
}

func (n *Node) produce(f *frame) {
	f.times.queued = time.Now()
	n.noteTopics(f.Request.Messages)
	n.machine.Produce(&f.Frame)
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
		if size := coordinator.MetadataBytes(m); size > MaxMetadataBytes {
			return apierr.New(apierr.MessageTooLarge, "message %d: key, headers and message id of %d bytes exceed %d", i, size, MaxMetadataBytes)
		}
		if err := httpapi.ValidateTopicName(m.Topic); err != nil {
			return err
		}
	}
	return nil
}

// admit asks Config.Admit whether a frame of that many messages may be
// accepted now.
func (n *Node) admit(messages int) error {
	if n.cfg.Admit == nil {
		return nil
	}
	return n.cfg.Admit(messages)
}

// MaxMetadataBytes bounds what one message carries besides its value (see
// coordinator.MaxMetadataBytes).
const MaxMetadataBytes = coordinator.MaxMetadataBytes

// InitProducer registers (or re-registers) a producer by name with this node
// as its owner, fencing older instances, and returns the session once its
// state is settled here and the older instance's in-flight messages are
// logged, with the next seq to send.
func (n *Node) InitProducer(ctx context.Context, name string) (*orderlogpb.InitProducerResponse, error) {
	if err := checkProducerName(name); err != nil {
		return nil, err
	}
	start := time.Now()
	incarnation := n.current().incarnation
	rec, previous, err := registerProducer(ctx, n.etcd, name, incarnation)
	if err != nil {
		return nil, apierr.New(apierr.Unavailable, "register producer: %v", err)
	}
	if rec.Owner == incarnation { // else the takeover hands it over from its live owner
		n.ownerChanged(rec, previous.Owner, incarnation, start)
	}
	answer := make(chan coordinator.InitDone, 1)
	var token uint64
	if !n.do(func() {
		if n.reg.incarnation != incarnation { // the lease was lost meanwhile
			answer <- coordinator.InitDone{Err: apierr.New(apierr.Unavailable, "ingest node lost its etcd lease: retry")}
			return
		}
		n.nextInit++
		token = n.nextInit
		n.initWaiters[token] = answer
		n.machine.InitProducer(rec.ID, rec.Epoch, token)
	}) {
		return nil, apierr.New(apierr.Unavailable, "ingest node is shutting down")
	}
	select {
	case done := <-answer:
		return done.Response, done.Err
	case <-ctx.Done():
		n.do(func() { delete(n.initWaiters, token) })
		return nil, apierr.New(apierr.Timeout, "producer %q not settled yet: %v", name, ctx.Err())
	}
}

// answerInit hands an InitProducer its answer.
func (n *Node) answerInit(done coordinator.InitDone) {
	if waiter, ok := n.initWaiters[done.Token]; ok {
		delete(n.initWaiters, done.Token)
		waiter <- done
	}
}
