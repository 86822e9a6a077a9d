package coordinator

import (
	"testing"

	"orderlog/proto/orderlogpb"
)

// An ack once given is never changed: in ack mode leader the answer may
// already be on its way when the message is logged (possibly at another
// offset, after a close below it). The frame is answered once, when every
// message has an ack, and released once, when it is answered and logged.
func TestAckOffsetKeepsTheFirstAck(t *testing.T) {
	m, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	f := NewFrame(&orderlogpb.ProduceRequest{RequestId: 3, Messages: []*orderlogpb.Message{{}, {}}}, nil)
	f.unlogged = 2

	m.ackOffset(f, 0, 5)
	m.ackOffset(f, 0, 9) // logged later, elsewhere
	f.unlogged--
	m.releaseIfDone(f)
	if rd := m.Ready(); len(rd.Answers) != 0 || len(rd.Releases) != 0 {
		t.Fatalf("answered %d times, released %d times with message 1 unacked", len(rd.Answers), len(rd.Releases))
	}
	f.unlogged--
	m.ackOffset(f, 1, 6)
	rd := m.Ready()
	if len(rd.Answers) != 1 || len(rd.Releases) != 1 {
		t.Fatalf("answered %d times, released %d times once complete, want 1 and 1", len(rd.Answers), len(rd.Releases))
	}
	resp := f.Response()
	if resp.Acks[0].Offset != 5 || resp.Acks[1].Offset != 6 || resp.RequestId != 3 {
		t.Fatalf("answer %v", resp)
	}
	m.releaseIfDone(f)
	if rd := m.Ready(); len(rd.Releases) != 0 {
		t.Fatal("released twice")
	}
}
