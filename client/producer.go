package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"orderlog/internal/apierr"
	"orderlog/proto/orderlogpb"
)

// ErrProducerClosed is returned by Send after Close.
var ErrProducerClosed = errors.New("client: producer closed")

// ProducerOptions tunes a Producer.
type ProducerOptions struct {
	// MaxInFlight bounds unacknowledged frames; Send blocks beyond it.
	MaxInFlight int
	// RetryBackoff is the pause before reconnecting after a broken stream.
	RetryBackoff time.Duration
}

func (o *ProducerOptions) validate() {
	if o.MaxInFlight <= 0 {
		o.MaxInFlight = 256
	}
	if o.RetryBackoff <= 0 {
		o.RetryBackoff = 100 * time.Millisecond
	}
}

// Producer is an idempotent producer session. Safe for concurrent use;
// frames are logged in the order Send was called.
type Producer struct {
	client *Client
	name   string
	opts   ProducerOptions
	slots  chan struct{} // one token per in-flight frame
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}

	mu struct {
		sync.Mutex
		id, epoch     uint64
		nextSeq       uint64
		nextRequestID uint64
		pending       []*Pending // in seq order
		stream        orderlogpb.Producer_ProduceClient
		closed        bool
		fatal         error
	}
}

// Pending is a frame sent and not yet resolved.
type Pending struct {
	request *orderlogpb.ProduceRequest
	done    chan struct{}
	acks    []*orderlogpb.Ack
	err     error
}

// Wait returns the frame's acks (one per message, in order) or its error.
func (p *Pending) Wait(ctx context.Context) ([]*orderlogpb.Ack, error) {
	select {
	case <-p.done:
		return p.acks, p.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// FirstSeq is the sequence number of the frame's first message.
func (p *Pending) FirstSeq() uint64 { return p.request.FirstSeq }

// NewProducer registers the producer name (fencing any older instance of it)
// and starts its stream.
func (c *Client) NewProducer(ctx context.Context, name string, opts ProducerOptions) (*Producer, error) {
	opts.validate()
	resp, err := c.producer.InitProducer(ctx, &orderlogpb.InitProducerRequest{Name: name})
	if err != nil {
		return nil, apierr.FromGRPC(err)
	}
	p := &Producer{client: c, name: name, opts: opts, slots: make(chan struct{}, opts.MaxInFlight), done: make(chan struct{})}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.mu.id, p.mu.epoch, p.mu.nextSeq = resp.ProducerId, resp.Epoch, resp.NextSeq
	go p.run()
	return p, nil
}

// ID and Epoch identify the session.
func (p *Producer) ID() (id, epoch uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mu.id, p.mu.epoch
}

// Send queues one frame of messages and returns at once (unless MaxInFlight
// frames are unacknowledged). Wait on the result for the offsets.
func (p *Producer) Send(ctx context.Context, messages ...*orderlogpb.Message) (*Pending, error) {
	select {
	case p.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.closed || p.mu.fatal != nil {
		<-p.slots
		return nil, errors.Join(ErrProducerClosed, p.mu.fatal)
	}
	p.mu.nextRequestID++
	pending := &Pending{done: make(chan struct{}), request: &orderlogpb.ProduceRequest{
		ProducerId: p.mu.id, Epoch: p.mu.epoch, FirstSeq: p.mu.nextSeq,
		Messages: messages, RequestId: p.mu.nextRequestID,
	}}
	p.mu.nextSeq += uint64(len(messages))
	p.mu.pending = append(p.mu.pending, pending)
	if p.mu.stream != nil {
		// A failed send surfaces on Recv; the frame is resent on reconnect.
		_ = p.mu.stream.Send(pending.request)
	}
	return pending, nil
}

// Produce sends one frame and waits for its acks.
func (p *Producer) Produce(ctx context.Context, messages ...*orderlogpb.Message) ([]*orderlogpb.Ack, error) {
	pending, err := p.Send(ctx, messages...)
	if err != nil {
		return nil, err
	}
	return pending.Wait(ctx)
}

// Close stops the producer; unacknowledged frames fail with ErrProducerClosed.
func (p *Producer) Close() {
	p.mu.Lock()
	p.mu.closed = true
	p.mu.Unlock()
	p.cancel()
	<-p.done
	p.failAll(ErrProducerClosed)
}

// run keeps a stream open, resending unacknowledged frames after each break.
func (p *Producer) run() {
	defer close(p.done)
	for p.ctx.Err() == nil {
		err := p.serveStream()
		if p.ctx.Err() != nil {
			return
		}
		var apiErr *apierr.Error
		if errors.As(err, &apiErr) && apiErr.Class() != apierr.ClassRetry && apiErr.Code != apierr.OutOfOrderSequence {
			p.setFatal(apiErr)
			return
		}
		select {
		case <-time.After(p.opts.RetryBackoff):
		case <-p.ctx.Done():
			return
		}
	}
}

func (p *Producer) serveStream() error {
	stream, err := p.client.producer.Produce(p.ctx)
	if err != nil {
		return apierr.FromGRPC(err)
	}
	if err := p.attach(stream); err != nil {
		return err
	}
	defer p.detach()
	for {
		resp, err := stream.Recv()
		if err != nil {
			return apierr.FromGRPC(err)
		}
		if err := p.resolve(resp); err != nil {
			return err
		}
	}
}

// attach makes stream current and resends every unacknowledged frame in order.
func (p *Producer) attach(stream orderlogpb.Producer_ProduceClient) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mu.stream = stream
	for _, pending := range p.mu.pending {
		if err := stream.Send(pending.request); err != nil {
			return apierr.FromGRPC(err)
		}
	}
	return nil
}

func (p *Producer) detach() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mu.stream = nil
}

// resolve completes the frame a response names. A refused frame ends the
// stream: retryable and out-of-order refusals are resent on the next one
// (frames behind a failed one are refused as out of order, so resending all
// in order restores the sequence); any other refusal is final.
func (p *Producer) resolve(resp *orderlogpb.ProduceResponse) error {
	if resp.ErrorCode != "" {
		return &apierr.Error{Code: apierr.Code(resp.ErrorCode), Message: resp.ErrorMessage}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, pending := range p.mu.pending {
		if pending.request.RequestId != resp.RequestId {
			continue
		}
		if len(resp.Acks) != len(pending.request.Messages) {
			return apierr.New(apierr.Internal, "frame %d: %d acks for %d messages", resp.RequestId, len(resp.Acks), len(pending.request.Messages))
		}
		pending.acks = resp.Acks
		close(pending.done)
		p.mu.pending = append(p.mu.pending[:i], p.mu.pending[i+1:]...)
		<-p.slots
		return nil
	}
	return nil // an answer to a frame resolved on an earlier stream
}

func (p *Producer) setFatal(err error) {
	p.mu.Lock()
	p.mu.fatal = fmt.Errorf("producer %q: %w", p.name, err)
	p.mu.Unlock()
	p.failAll(err)
}

func (p *Producer) failAll(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, pending := range p.mu.pending {
		pending.err = err
		close(pending.done)
		<-p.slots
	}
	p.mu.pending = nil
}

// NextSeq is the sequence number the next message sent will get.
func (p *Producer) NextSeq() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mu.nextSeq
}
