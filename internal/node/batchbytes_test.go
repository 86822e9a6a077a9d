package node

import (
	"bytes"
	"context"
	"testing"
	"time"

	"orderlog/client"
	"orderlog/proto/orderlogpb"
)

// TestBatchesCountKeysAndHeaders: frames of small values with big keys
// (147 MB of keys in all) that wait together, while a restarted node takes
// the producer over, are all logged. The batch byte limit counted only
// values, so they were sealed into one batch larger than a ledger entry may
// be, which the store refused again and again while every later message
// waited behind it.
func TestBatchesCountKeysAndHeaders(t *testing.T) {
	if testing.Short() {
		t.Skip("147 MB through a real node")
	}
	dir := t.TempDir()
	s := startServer(t, dir)
	c := dial(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p, err := c.NewProducer(ctx, "big-keys", client.ProducerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Produce(ctx, msg("t", "", "first")); err != nil {
		t.Fatal(err)
	}
	id, epoch := p.ID()
	p.Close()
	s.Close()
	s = startServer(t, dir)
	defer s.Close()
	raw, err := dial(t, s).RawProducer().Produce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const frames, perFrame = 16, 1000
	key := bytes.Repeat([]byte{'k'}, 9<<10)
	for f := range frames {
		req := &orderlogpb.ProduceRequest{RequestId: uint64(f + 1), ProducerId: id, Epoch: epoch, FirstSeq: 1 + uint64(f*perFrame)}
		for range perFrame {
			req.Messages = append(req.Messages, &orderlogpb.Message{Topic: "t", Key: key, Value: []byte("x"),
				Headers: []*orderlogpb.Header{{Key: "h", Value: []byte("v")}}})
		}
		if err := raw.Send(req); err != nil {
			t.Fatal(err)
		}
	}
	for range frames {
		resp, err := raw.Recv()
		if err != nil {
			t.Fatalf("stream ended before every frame was answered: %v", err)
		}
		if resp.ErrorCode != "" || len(resp.Acks) != perFrame {
			t.Fatalf("frame %d: %s %s, %d acks", resp.RequestId, resp.ErrorCode, resp.ErrorMessage, len(resp.Acks))
		}
	}
}
