package coordinator

import (
	"errors"

	"orderlog/ingest/batch"
	"orderlog/ingest/producer"
	"orderlog/internal/apierr"
	"orderlog/proto/orderlogpb"
)

// Frame is one produce request being answered.
//
// Invariant: remaining counts the messages without an outcome yet; the
// frame is answered (handed out in Ready.Answers) exactly once, when
// remaining reaches 0 or on refusal. unlogged counts its messages in the
// pipeline: their records (which may alias the request's receive buffer)
// are encoded again if their ledger closes below them, even after an early
// ack (ack mode leader), so the frame is handed out in Ready.Releases only
// when it is answered and unlogged is 0.
type Frame struct {
	Request *orderlogpb.ProduceRequest
	// Owner is the driver's own record of the frame (the machine never
	// reads it).
	Owner any

	acks      []*orderlogpb.Ack
	ackStore  []orderlogpb.Ack // backs the acks of logged messages: one allocation per frame
	digest    uint64           // an Idempotency-Key request's RequestDigest (computed by NewFrame)
	remaining int
	unlogged  int
	response  *orderlogpb.ProduceResponse
	released  bool
}

// NewFrame returns a frame for req, not yet answered. For a request with an
// Idempotency-Key it computes the message's digest, on the caller's
// goroutine (the value may be large): req must be complete (its topic set).
func NewFrame(req *orderlogpb.ProduceRequest, owner any) *Frame {
	f := &Frame{Request: req, Owner: owner, acks: make([]*orderlogpb.Ack, len(req.Messages)), remaining: len(req.Messages)}
	if req.IdempotencyKey != "" && len(req.Messages) == 1 && req.Messages[0] != nil {
		f.digest = RequestDigest(req.Messages[0])
	}
	return f
}

// Response is the frame's answer once it is handed out in Ready.Answers.
func (f *Frame) Response() *orderlogpb.ProduceResponse { return f.response }

// MessageRef is what the pipeline carries for one message: the frame its
// ack goes to and the record to encode.
type MessageRef struct {
	Frame  *Frame
	Index  int
	Record batch.Record
}

// ack records message i's outcome and answers the frame when it is complete.
func (m *Machine) ack(f *Frame, i int, ack *orderlogpb.Ack) {
	if f.acks[i] != nil || f.response != nil {
		return
	}
	f.acks[i] = ack
	f.remaining--
	if f.remaining == 0 {
		f.response = &orderlogpb.ProduceResponse{RequestId: f.Request.RequestId, Acks: f.acks}
		m.ready.Answers = append(m.ready.Answers, f)
		m.releaseIfDone(f)
	}
}

// ackOffset records that message i is at offset. An ack already given is
// kept as it is: the answer may be on its way (ack mode leader acks before
// the message is logged).
func (m *Machine) ackOffset(f *Frame, i int, offset uint64) {
	if f.acks[i] != nil {
		return
	}
	if f.ackStore == nil {
		f.ackStore = make([]orderlogpb.Ack, len(f.acks))
	}
	a := &f.ackStore[i]
	a.Offset = offset
	m.ack(f, i, a)
}

// refuse answers the whole frame with an error; nothing of it was logged.
func (m *Machine) refuse(f *Frame, err error) {
	if f.response != nil {
		return
	}
	f.response = RefusalResponse(f.Request, err)
	f.remaining = 0
	m.ready.Answers = append(m.ready.Answers, f)
	m.releaseIfDone(f)
}

// releaseIfDone hands the frame out for release once nothing needs its
// messages any more.
func (m *Machine) releaseIfDone(f *Frame) {
	if !f.released && f.response != nil && f.unlogged == 0 {
		f.released = true
		m.ready.Releases = append(m.ready.Releases, f)
	}
}

// RefusalResponse is the answer refusing a whole request with err.
func RefusalResponse(req *orderlogpb.ProduceRequest, err error) *orderlogpb.ProduceResponse {
	apiErr := apierr.As(err)
	if req.IdempotencyKey != "" && bucketRefusal(apiErr.Code) {
		// The client knows nothing of the key's bucket producer: its
		// epoch or sequence moved (the bucket changed owners). A retry
		// with the same key is exactly-once, here or on another node.
		apiErr = apierr.New(apierr.Unavailable, "the idempotency key's bucket moved (%s): retry with the same key", apiErr.Message)
	}
	resp := &orderlogpb.ProduceResponse{RequestId: req.RequestId, ErrorCode: string(apiErr.Code), ErrorMessage: apiErr.Message}
	var refusal *producer.RefusalError
	if errors.As(err, &refusal) && refusal.Reason == producer.OutOfOrderSequence {
		resp.ExpectedSeq = refusal.ExpectedSeq
	}
	return resp
}

// bucketRefusal: a refusal that concerns the producer session, which for
// a keyed frame is the node's bucket producer, not the client's.
func bucketRefusal(code apierr.Code) bool {
	return code == apierr.ProducerFenced || code == apierr.UnknownProducer || code == apierr.OutOfOrderSequence
}

// refusalError maps a producer-table refusal to the API error catalogue,
// keeping the refusal in the chain for the expected seq.
func refusalError(r *producer.RefusalError) error {
	code := apierr.UnknownProducer
	switch r.Reason {
	case producer.OutOfOrderSequence:
		code = apierr.OutOfOrderSequence
	case producer.Fenced:
		code = apierr.ProducerFenced
	}
	return errors.Join(apierr.New(code, "%s", r.Error()), r)
}
