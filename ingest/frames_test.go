package ingest

import (
	"testing"

	"orderlog/proto/orderlogpb"
)

// An ack once given is never changed: in ack mode leader the answer may
// already be on its way when the message is logged (possibly at another
// offset, after a close below it).
func TestAckOffsetKeepsTheFirstAck(t *testing.T) {
	var answers []*orderlogpb.ProduceResponse
	req := &orderlogpb.ProduceRequest{RequestId: 3, Messages: []*orderlogpb.Message{{}, {}}}
	f := newFrame(req, func(r *orderlogpb.ProduceResponse) { answers = append(answers, r) })
	released := 0
	f.release = func() { released++ }
	f.unlogged = 2

	f.ackOffset(0, 5)
	first := f.acks[0]
	f.ackOffset(0, 9) // logged later, elsewhere
	if f.acks[0] != first || first.Offset != 5 {
		t.Fatalf("ack 0 became %v, want the first one (offset 5)", f.acks[0])
	}
	f.unlogged--
	f.releaseIfDone()
	if len(answers) != 0 || released != 0 {
		t.Fatalf("answered %d times, released %d times with message 1 unacked", len(answers), released)
	}
	f.unlogged--
	f.ackOffset(1, 6)
	if len(answers) != 1 || answers[0].Acks[0].Offset != 5 || answers[0].Acks[1].Offset != 6 || answers[0].RequestId != 3 {
		t.Fatalf("answers %v", answers)
	}
	if released != 1 {
		t.Fatalf("buffer released %d times once answered and logged, want 1", released)
	}
	f.releaseIfDone()
	if released != 1 {
		t.Fatalf("buffer released %d times, want once", released)
	}
}
