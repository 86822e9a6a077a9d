package localstream

import (
	"context"
	"errors"
	"io"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

type msg struct{ n int }

// Everything a handler sent before it returned reaches the client, then
// the handler's outcome: as over gRPC, nothing is lost to the end.
func TestClientGetsEveryResponseThenTheOutcome(t *testing.T) {
	for _, outcome := range []error{nil, status.Error(codes.Aborted, "handler gave up")} {
		for round := 0; round < 200; round++ {
			p := New[msg, msg](context.Background())
			const sent = window // fills the buffer: the handler returns before the client reads
			go func() {
				srv := p.Server()
				for i := range sent {
					if err := srv.Send(&msg{i}); err != nil {
						p.ServerDone(err)
						return
					}
				}
				p.ServerDone(outcome)
			}()
			c := p.Client()
			<-p.done
			for i := range sent {
				m, err := c.Recv()
				if err != nil || m.n != i {
					t.Fatalf("round %d: Recv %d = %v, %v", round, i, m, err)
				}
			}
			_, err := c.Recv()
			if outcome == nil && !errors.Is(err, io.EOF) || outcome != nil && status.Code(err) != codes.Aborted {
				t.Fatalf("round %d: after the responses Recv = %v, want %v", round, err, outcome)
			}
		}
	}
}

// A request sent before CloseSend reaches the handler, then io.EOF.
func TestHandlerGetsRequestsThenEOF(t *testing.T) {
	p := New[msg, msg](context.Background())
	c := p.Client()
	if err := c.Send(&msg{7}); err != nil {
		t.Fatal(err)
	}
	_ = c.CloseSend()
	srv := p.Server()
	if m, err := srv.Recv(); err != nil || m.n != 7 {
		t.Fatalf("Recv = %v, %v", m, err)
	}
	if _, err := srv.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("after CloseSend Recv = %v, want io.EOF", err)
	}
}
