package client

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"orderlog/internal/grpcopt"
	"orderlog/proto/orderlogpb"
)

func TestNeedsProbe(t *testing.T) {
	t0 := time.Unix(1000, 0)
	after := time.Second
	for name, c := range map[string]struct {
		inFlight int
		quiet    time.Duration // how long the stream has been quiet
		want     bool
	}{
		"nothing waits":            {inFlight: 0, quiet: time.Hour, want: false},
		"frames wait, quiet short": {inFlight: 3, quiet: after - time.Millisecond, want: false},
		"frames wait, quiet long":  {inFlight: 1, quiet: after, want: true},
	} {
		if got := needsProbe(c.inFlight, t0, t0.Add(c.quiet), after); got != c.want {
			t.Errorf("%s: needsProbe = %v, want %v", name, got, c.want)
		}
	}
}

func TestProbeFailed(t *testing.T) {
	serving := &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}
	notServing := &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_NOT_SERVING}
	for name, c := range map[string]struct {
		resp *healthpb.HealthCheckResponse
		err  error
		want bool
	}{
		"serving":                     {serving, nil, false},
		"cannot own producers":        {notServing, nil, true},
		"no answer in time":           {nil, status.Error(codes.DeadlineExceeded, "deadline"), true},
		"connection gone":             {nil, status.Error(codes.Unavailable, "refused"), true},
		"no health service":           {nil, status.Error(codes.Unimplemented, "unknown service"), false},
		"unknown service (NOT_FOUND)": {nil, status.Error(codes.NotFound, "unknown service"), false},
	} {
		if got := probeFailed(c.resp, c.err); got != c.want {
			t.Errorf("%s: probeFailed = %v, want %v", name, got, c.want)
		}
	}
}

// fakeNode is a node's Producer and health services. A hung node (a
// paused process: its connections stay open) answers no frame and no
// health check; a slow one holds frames until release is closed but
// answers health checks, counting them in probes.
type fakeNode struct {
	orderlogpb.UnimplementedProducerServer
	healthpb.UnimplementedHealthServer
	hung    bool
	cutOff  bool          // answers health checks NOT_SERVING and holds frames
	release chan struct{} // nil: frames are answered at once
	base    uint64        // offset of seq 0
	probes  atomic.Int32
	streams atomic.Int32
}

func (f *fakeNode) InitProducer(context.Context, *orderlogpb.InitProducerRequest) (*orderlogpb.InitProducerResponse, error) {
	return &orderlogpb.InitProducerResponse{ProducerId: 1, Epoch: 1}, nil
}

func (f *fakeNode) Produce(stream grpc.BidiStreamingServer[orderlogpb.ProduceRequest, orderlogpb.ProduceResponse]) error {
	f.streams.Add(1)
	for {
		req, err := stream.Recv()
		if err != nil {
			return err
		}
		if f.hung || f.cutOff {
			continue
		}
		if f.release != nil {
			select {
			case <-f.release:
			case <-stream.Context().Done():
				return stream.Context().Err()
			}
		}
		resp := &orderlogpb.ProduceResponse{RequestId: req.RequestId}
		for i := range req.Messages {
			resp.Acks = append(resp.Acks, &orderlogpb.Ack{Offset: f.base + req.FirstSeq + uint64(i)})
		}
		if err := stream.Send(resp); err != nil {
			return err
		}
	}
}

func (f *fakeNode) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if f.hung {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if f.cutOff {
		return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_NOT_SERVING}, nil
	}
	if f.probes.Add(1) == 3 && f.release != nil {
		close(f.release) // the third probe answered: the node's frames are logged now
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

func startFakeNode(t *testing.T, f *fakeNode) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpcopt.ServerOptions()...)
	orderlogpb.RegisterProducerServer(srv, f)
	healthpb.RegisterHealthServer(srv, f)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

// produceOne starts a producer on the client's first endpoint (fast stall
// probes) and returns the ack of one message and the endpoint it ended on.
func produceOne(t *testing.T, addrs string) (uint64, string) {
	t.Helper()
	c, err := Dial(addrs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p, err := c.NewProducer(ctx, "p", ProducerOptions{StallProbeAfter: 20 * time.Millisecond, StallProbeTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	acks, err := p.Produce(ctx, &orderlogpb.Message{Topic: "t", Value: []byte("v")})
	if err != nil {
		t.Fatal(err)
	}
	return acks[0].Offset, p.Endpoint()
}

// A producer whose node keeps the stream open but answers neither its
// frames nor a health check (a paused process) moves to the next node
// without waiting for the stream to break.
func TestProducerMovesOffANodeThatAnswersNothing(t *testing.T) {
	hung, live := &fakeNode{hung: true}, &fakeNode{base: 1000}
	hungAddr, liveAddr := startFakeNode(t, hung), startFakeNode(t, live)
	offset, endpoint := produceOne(t, hungAddr+","+liveAddr)
	if endpoint != liveAddr || offset != 1000 {
		t.Fatalf("acked offset %d on %s, want offset 1000 from the live node %s", offset, endpoint, liveAddr)
	}
	if hung.streams.Load() != 1 || live.streams.Load() != 1 {
		t.Fatalf("produce streams: %d to the hung node, %d to the live one; want 1 and 1", hung.streams.Load(), live.streams.Load())
	}
}

// A producer whose node holds its frames and says it cannot own producers
// (NOT_SERVING: cut off from etcd by a partition) moves to the next node.
func TestProducerMovesOffANodeThatCannotOwnIt(t *testing.T) {
	cut, live := &fakeNode{cutOff: true}, &fakeNode{base: 1000}
	cutAddr, liveAddr := startFakeNode(t, cut), startFakeNode(t, live)
	offset, endpoint := produceOne(t, cutAddr+","+liveAddr)
	if endpoint != liveAddr || offset != 1000 {
		t.Fatalf("acked offset %d on %s, want offset 1000 from the live node %s", offset, endpoint, liveAddr)
	}
}

// A node that holds frames (waiting for a sequencer leader, a takeover)
// but answers its health checks SERVING keeps its producer: every node
// waits alike, and moving would only hand the producer around.
func TestProducerStaysOnASlowNodeThatAnswersProbes(t *testing.T) {
	slow, other := &fakeNode{release: make(chan struct{})}, &fakeNode{base: 1000}
	slowAddr, otherAddr := startFakeNode(t, slow), startFakeNode(t, other)
	offset, endpoint := produceOne(t, slowAddr+","+otherAddr)
	if endpoint != slowAddr || offset != 0 {
		t.Fatalf("acked offset %d on %s, want offset 0 from the slow node %s", offset, endpoint, slowAddr)
	}
	if slow.probes.Load() < 3 || other.streams.Load() != 0 {
		t.Fatalf("%d probes of the slow node, %d produce streams to the other; want ≥ 3 and 0", slow.probes.Load(), other.streams.Load())
	}
}
