package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"orderlog/client"
	"orderlog/proto/orderlogpb"
)

// TestTailResumesAcrossAKill: a client tail running while `orderlog dev` is
// SIGKILLed and started again goes on where it stopped: every message
// produced before and after, once each, in offset order.
func TestTailResumesAcrossAKill(t *testing.T) {
	srv, c := startDev(t)
	defer srv.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	produce := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			raw, err := c.RawProducer().Produce(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := raw.Send(&orderlogpb.ProduceRequest{RequestId: 1, Messages: []*orderlogpb.Message{{Topic: "t", Value: []byte(fmt.Sprint(i))}}}); err != nil {
				t.Fatal(err)
			}
			if resp, err := raw.Recv(); err != nil || resp.ErrorCode != "" {
				t.Fatalf("produce %d: %v %v", i, resp, err)
			}
			raw.CloseSend()
		}
	}
	got := make(chan string, 100)
	tailed := make(chan error, 1)
	go func() {
		tailed <- c.Tail(ctx, 0, func(p *client.Page) error {
			for _, m := range p.Messages {
				got <- string(m.Message.Value)
			}
			return nil
		})
	}()
	expect := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			select {
			case v := <-got:
				if v != fmt.Sprint(i) {
					t.Fatalf("tail gave %q, want %d", v, i)
				}
			case err := <-tailed:
				t.Fatalf("tail ended: %v", err)
			case <-ctx.Done():
				t.Fatalf("tail stopped before message %d", i)
			}
		}
	}
	produce(0, 5)
	expect(0, 5)
	srv.kill()
	srv.start()
	srv.waitReady(c)
	produce(5, 10)
	expect(5, 10)
	select {
	case v := <-got:
		t.Fatalf("tail gave %q after the last message", v)
	case <-time.After(200 * time.Millisecond):
	}
}
