package ingest

import (
	"errors"
	"time"

	"orderlog/ingest/batch"
	"orderlog/ingest/producer"
	"orderlog/internal/apierr"
	"orderlog/proto/orderlogpb"
)

// frame is one produce request being answered. Owned by the node loop.
// Invariant: remaining counts the messages of the frame without an ack yet;
// the frame is answered exactly once, when remaining reaches 0 or on refusal.
// unlogged counts its messages in the pipeline: their records (which may
// alias the request's receive buffer) are encoded again if their ledger
// closes below them, even after an early ack (ack mode leader), so the
// buffer is released only when the frame is answered and unlogged is 0.
type frame struct {
	request   *orderlogpb.ProduceRequest
	acks      []*orderlogpb.Ack
	ackStore  []orderlogpb.Ack // backs the acks of logged messages: one allocation per frame
	remaining int
	unlogged  int
	answer    func(*orderlogpb.ProduceResponse)
	release   func() // nil once called (or if the request owns its bytes)
	arrived   time.Time
	times     frameTimes
}

// frameTimes are when a frame passed the stages of the write path, for
// the per-frame stage metrics (zero: not reached).
type frameTimes struct {
	queued    time.Time // taken up by the node loop
	appended  time.Time // the entry holding its latest message was appended
	confirmed time.Time // that entry was confirmed
}

func newFrame(req *orderlogpb.ProduceRequest, answer func(*orderlogpb.ProduceResponse)) *frame {
	return &frame{request: req, acks: make([]*orderlogpb.Ack, len(req.Messages)), remaining: len(req.Messages), answer: answer,
		arrived: time.Now()}
}

// ack records message i's outcome and answers the frame when it is complete.
func (f *frame) ack(i int, ack *orderlogpb.Ack) {
	if f.acks[i] != nil {
		return
	}
	f.acks[i] = ack
	f.remaining--
	if f.remaining == 0 {
		f.answer(&orderlogpb.ProduceResponse{RequestId: f.request.RequestId, Acks: f.acks})
		f.releaseIfDone()
	}
}

// ackOffset records that message i is at offset. An ack already given is
// kept as it is: the answer may be on its way (ack mode leader acks before
// the message is logged).
func (f *frame) ackOffset(i int, offset uint64) {
	if f.acks[i] != nil {
		return
	}
	if f.ackStore == nil {
		f.ackStore = make([]orderlogpb.Ack, len(f.acks))
	}
	a := &f.ackStore[i]
	a.Offset = offset
	f.ack(i, a)
}

// releaseIfDone releases the request's receive buffer once nothing needs
// the frame's messages any more.
func (f *frame) releaseIfDone() {
	if f.release != nil && f.remaining == 0 && f.unlogged == 0 {
		f.release()
		f.release = nil
	}
}

// refuse answers the whole frame with an error; nothing of it was logged.
func (f *frame) refuse(err error) {
	apiErr := apierr.As(err)
	resp := &orderlogpb.ProduceResponse{RequestId: f.request.RequestId, ErrorCode: string(apiErr.Code), ErrorMessage: apiErr.Message}
	var refusal *producer.RefusalError
	if errors.As(err, &refusal) && refusal.Reason == producer.OutOfOrderSequence {
		resp.ExpectedSeq = refusal.ExpectedSeq
	}
	f.remaining = 0
	f.answer(resp)
	f.releaseIfDone()
}

// messageRef is what the pipeline carries for one message: where its ack
// goes and the record to encode.
type messageRef struct {
	frame  *frame
	index  int
	record batch.Record
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
