// Package localstream connects a gRPC streaming client and handler in the
// same process: the two ends of one stream are Go channels, messages are
// handed over by pointer (no marshalling, framing or sockets), and the
// handler's return value ends the client's Recv as a gRPC status would.
//
// Handing over pointers is safe only when neither side changes a message
// after sending it and the handler keeps no request after answering it, as
// gRPC already asks of its users.
package localstream

import (
	"context"
	"io"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Pipe connects the two ends of one in-process stream: requests flow
// to the handler, responses back, and the handler's return value ends the
// client's Recv (io.EOF for nil) like a gRPC status would.
type Pipe[Req, Resp any] struct {
	ctx      context.Context
	cancel   context.CancelFunc
	requests chan *Req
	closeReq sync.Once
	// requests and responses are bounded like a flow-controlled stream's
	// window: a Send beyond it waits for the other side (or for the end).
	// The handler's responses are all buffered before done closes, so the
	// client drains them before it reports the end.
	responses chan *Resp
	done      chan struct{} // closed when the handler returned
	err       error         // the handler's result, set before done closes
}

// window is how many messages each direction buffers.
const window = 64

// New returns the pipe of one stream whose client context is ctx.
func New[Req, Resp any](ctx context.Context) *Pipe[Req, Resp] {
	ctx, cancel := context.WithCancel(ctx)
	return &Pipe[Req, Resp]{ctx: ctx, cancel: cancel, requests: make(chan *Req, window),
		responses: make(chan *Resp, window), done: make(chan struct{})}
}

// ServerDone ends the stream with the handler's result.
func (p *Pipe[Req, Resp]) ServerDone(err error) {
	p.err = err
	close(p.done)
	p.cancel()
}

func (p *Pipe[Req, Resp]) ctxErr() error {
	return status.FromContextError(p.ctx.Err()).Err()
}

// Server is the end the handler gets.
func (p *Pipe[Req, Resp]) Server() *ServerStream[Req, Resp] {
	return &ServerStream[Req, Resp]{p: p}
}

// Client is the caller's end.
func (p *Pipe[Req, Resp]) Client() *ClientStream[Req, Resp] {
	return &ClientStream[Req, Resp]{p: p}
}

// ClientStream is the caller's end.
type ClientStream[Req, Resp any] struct {
	p          *Pipe[Req, Resp]
	sendClosed bool // CloseSend was called (Send and CloseSend are not concurrent, as in gRPC)
}

func (s *ClientStream[Req, Resp]) Send(m *Req) error {
	if s.sendClosed {
		return status.Error(codes.Internal, "localstream: Send after CloseSend")
	}
	select {
	case s.p.requests <- m:
		return nil
	case <-s.p.done:
		return io.EOF // as gRPC: the real outcome comes from Recv
	case <-s.p.ctx.Done():
		return io.EOF
	}
}

func (s *ClientStream[Req, Resp]) Recv() (*Resp, error) {
	select {
	case m := <-s.p.responses:
		return m, nil
	case <-s.p.done:
		return s.afterDone()
	case <-s.p.ctx.Done():
		// The handler may have finished just now: prefer its outcome.
		select {
		case <-s.p.done:
			return s.afterDone()
		default:
			return nil, s.p.ctxErr()
		}
	}
}

// afterDone returns what the handler sent before it returned, then its
// outcome.
func (s *ClientStream[Req, Resp]) afterDone() (*Resp, error) {
	select {
	case m := <-s.p.responses:
		return m, nil
	default:
	}
	if s.p.err != nil {
		return nil, s.p.err
	}
	return nil, io.EOF
}

func (s *ClientStream[Req, Resp]) CloseSend() error {
	s.sendClosed = true
	s.p.closeReq.Do(func() { close(s.p.requests) })
	return nil
}

func (s *ClientStream[Req, Resp]) Header() (metadata.MD, error) { return nil, nil }
func (s *ClientStream[Req, Resp]) Trailer() metadata.MD         { return nil }
func (s *ClientStream[Req, Resp]) Context() context.Context     { return s.p.ctx }
func (s *ClientStream[Req, Resp]) SendMsg(m any) error          { return s.Send(m.(*Req)) }
func (s *ClientStream[Req, Resp]) RecvMsg(m any) error {
	r, err := s.Recv()
	if err == nil {
		err = copyInto(m, r)
	}
	return err
}

// ServerStream is the handler's end.
type ServerStream[Req, Resp any] struct {
	p *Pipe[Req, Resp]
}

func (s *ServerStream[Req, Resp]) Recv() (*Req, error) {
	select {
	case m, ok := <-s.p.requests:
		if !ok {
			return nil, io.EOF
		}
		return m, nil
	case <-s.p.ctx.Done():
		return nil, s.p.ctxErr()
	}
}

func (s *ServerStream[Req, Resp]) Send(m *Resp) error {
	select {
	case s.p.responses <- m:
		return nil
	case <-s.p.ctx.Done():
		return s.p.ctxErr()
	}
}

func (s *ServerStream[Req, Resp]) SetHeader(metadata.MD) error  { return nil }
func (s *ServerStream[Req, Resp]) SendHeader(metadata.MD) error { return nil }
func (s *ServerStream[Req, Resp]) SetTrailer(metadata.MD)       {}
func (s *ServerStream[Req, Resp]) Context() context.Context     { return s.p.ctx }
func (s *ServerStream[Req, Resp]) SendMsg(m any) error          { return s.Send(m.(*Resp)) }
func (s *ServerStream[Req, Resp]) RecvMsg(m any) error {
	r, err := s.Recv()
	if err == nil {
		err = copyInto(m, r)
	}
	return err
}

// copyInto fills dst from src for the generic RecvMsg (Recv hands over the
// message itself).
func copyInto(dst, src any) error {
	d, ok1 := dst.(proto.Message)
	s, ok2 := src.(proto.Message)
	if !ok1 || !ok2 {
		return status.Errorf(codes.Internal, "localstream: %T is not a protobuf message", dst)
	}
	proto.Reset(d)
	proto.Merge(d, s)
	return nil
}
