package ingest

import (
	"context"
	"errors"
	"io"
	"sync"

	"google.golang.org/grpc"

	"orderlog/ingest/coordinator"
	"orderlog/internal/apierr"
	"orderlog/internal/grpcopt"
	"orderlog/proto/orderlogpb"
	"orderlog/proto/producewire"
)

// ProducerService is the Producer gRPC service over a Node.
type ProducerService struct {
	orderlogpb.UnimplementedProducerServer
	node *Node
}

// NewProducerService returns the service.
func NewProducerService(n *Node) *ProducerService { return &ProducerService{node: n} }

// Register adds the service to a gRPC server.
func (s *ProducerService) Register(srv *grpc.Server) { orderlogpb.RegisterProducerServer(srv, s) }

// InitProducer registers a producer name and returns its session.
func (s *ProducerService) InitProducer(ctx context.Context, req *orderlogpb.InitProducerRequest) (*orderlogpb.InitProducerResponse, error) {
	return s.node.InitProducer(ctx, req.Name)
}

// maxQueuedAnswers bounds the answers waiting to be sent on one stream; a
// client that stops reading stops being served.
const maxQueuedAnswers = 4096

// Produce serves one bidirectional stream: every request frame gets exactly
// one response frame, when all its messages are logged or it is refused.
// After the client half-closes, the stream stays open until every frame it
// sent is answered. Only this goroutine sends, so nothing is sent after it
// returns.
func (s *ProducerService) Produce(stream grpc.BidiStreamingServer[orderlogpb.ProduceRequest, orderlogpb.ProduceResponse]) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	answers := make(chan *orderlogpb.ProduceResponse, maxQueuedAnswers)
	var unanswered sync.WaitGroup // frames handed to the node, not yet answered
	answer := func(resp *orderlogpb.ProduceResponse) {
		select {
		case answers <- resp:
		default: // the client is not reading: end the stream, it resends
			cancel()
		}
		unanswered.Done()
	}
	received := make(chan error, 1)
	go func() { received <- s.receive(ctx, stream, &unanswered, answer) }()
	var allAnswered chan struct{} // made once the client has half-closed
	for {
		select {
		case resp := <-answers:
			if err := stream.Send(resp); err != nil {
				return err
			}
		case err := <-received:
			if err != nil {
				return err
			}
			received = nil // the receive loop added its last frame
			allAnswered = make(chan struct{})
			go func() { unanswered.Wait(); close(allAnswered) }()
		case <-allAnswered:
			for {
				select {
				case resp := <-answers:
					if err := stream.Send(resp); err != nil {
						return err
					}
				default:
					return nil
				}
			}
		case <-ctx.Done():
			return apierr.New(apierr.Unavailable, "produce stream ended: %v", ctx.Err())
		}
	}
}

// receive hands each request frame to the node until the client half-closes
// (nil) or the stream fails. Returning from Produce ends a RecvMsg that is
// still waiting here.
func (s *ProducerService) receive(ctx context.Context, stream grpc.BidiStreamingServer[orderlogpb.ProduceRequest, orderlogpb.ProduceResponse],
	unanswered *sync.WaitGroup, answer func(*orderlogpb.ProduceResponse)) error {
	for {
		// Received undecoded and decoded in place: message values stay in
		// the receive buffer until the frame releases it.
		var raw grpcopt.Raw
		err := stream.RecvMsg(&raw)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if ctx.Err() != nil {
			raw.Buf.Free()
			return apierr.New(apierr.Unavailable, "produce stream ended: %v", ctx.Err())
		}
		req, err := producewire.DecodeProduceRequest(raw.Buf.ReadOnlyData())
		if err != nil {
			raw.Buf.Free()
			return apierr.New(apierr.MalformedRequest, "%v", err)
		}
		unanswered.Add(1)
		if err := s.node.authorizeFrame(ctx, req); err != nil {
			answer(coordinator.RefusalResponse(req, err))
			raw.Buf.Free()
			holdBackOverQuota(ctx, err) // authorize.go
			continue
		}
		s.node.ProduceFromBuffer(req, raw.Buf.Free, answer)
	}
}
