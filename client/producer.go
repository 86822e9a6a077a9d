package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

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
	// StallProbeAfter is how long frames may wait on a stream that answers
	// nothing before the producer asks the node whether it is alive (the
	// gRPC health service); StallProbeTimeout is how long that question may
	// go unanswered before the node counts as failed and the producer moves
	// (a paused or hung node keeps its connections open and never ends the
	// stream). Defaults 500 ms and 500 ms: a live node answers a health
	// check in milliseconds, and a move off a live node costs one clean
	// handover (the node it moves to asks the old owner to release it).
	StallProbeAfter, StallProbeTimeout time.Duration
}

func (o *ProducerOptions) validate() {
	if o.MaxInFlight <= 0 {
		o.MaxInFlight = 256
	}
	if o.RetryBackoff <= 0 {
		o.RetryBackoff = 100 * time.Millisecond
	}
	if o.StallProbeAfter <= 0 {
		o.StallProbeAfter = 500 * time.Millisecond
	}
	if o.StallProbeTimeout <= 0 {
		o.StallProbeTimeout = 500 * time.Millisecond
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
	// lastOffset is InitProducer's last_offset (nil: none).
	lastOffset *uint64

	mu struct {
		sync.Mutex
		id, epoch     uint64
		nextSeq       uint64
		nextRequestID uint64
		pending       []*Pending // in seq order
		stream        orderlogpb.Producer_ProduceClient
		closed        bool
		fatal         error
		// endpoint is the node the stream goes to; refusals counts the
		// retryable refusals since the last ack, to move off a node that
		// is up but cannot serve.
		endpoint string
		refusals int
	}
	// heard is when the current stream last answered anything or was
	// opened (unix nanoseconds): the stall probe's clock. Atomic, not under
	// mu: a Send blocked on the stream's flow control holds mu.
	heard atomic.Int64
}

// A producer moves to another node after this many retryable refusals in a
// row from one node (a broken stream moves it at once).
const moveAfterRefusals = 3

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
// and starts its stream. Producers start at the client's endpoints in turn
// (InitProducer moves on while nodes fail) and stay at their node until it
// fails.
func (c *Client) NewProducer(ctx context.Context, name string, opts ProducerOptions) (*Producer, error) {
	opts.validate()
	endpoint, resp, err := c.initProducer(ctx, name)
	if err != nil {
		return nil, err
	}
	p := &Producer{client: c, name: name, opts: opts, slots: make(chan struct{}, opts.MaxInFlight), done: make(chan struct{})}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.mu.id, p.mu.epoch, p.mu.nextSeq = resp.ProducerId, resp.Epoch, resp.NextSeq
	p.mu.endpoint = endpoint
	p.lastOffset = resp.LastOffset
	go p.run()
	return p, nil
}

// LastOffset is the offset of the producer's last message logged before
// this session began, when the node remembered it (see
// InitProducerResponse.last_offset).
func (p *Producer) LastOffset() (uint64, bool) {
	if p.lastOffset == nil {
		return 0, false
	}
	return *p.lastOffset, true
}

// initProducer calls InitProducer at the next producer endpoint and, while
// nodes fail, the ones after it, and returns the endpoint that answered.
// A retry after a lost answer bumps the epoch once more, harmlessly: no
// frame of this instance exists yet.
func (c *Client) initProducer(ctx context.Context, name string) (string, *orderlogpb.InitProducerResponse, error) {
	endpoint := c.endpoints.nextProducer()
	var err error
	for range len(c.endpoints.list()) {
		var conn *grpc.ClientConn
		if conn, err = c.endpoints.conn(endpoint); err != nil {
			return "", nil, err
		}
		attemptCtx, cancel := context.WithTimeout(ctx, attemptTimeout)
		var resp *orderlogpb.InitProducerResponse
		resp, err = orderlogpb.NewProducerClient(conn).InitProducer(attemptCtx, &orderlogpb.InitProducerRequest{Name: name})
		cancel()
		if err == nil {
			return endpoint, resp, nil
		}
		if !nodeFailed(ctx, apierr.FromGRPC(err)) {
			break
		}
		c.nodeFailed(endpoint)
		endpoint = c.endpoints.after(endpoint)
	}
	return "", nil, apierr.FromGRPC(err)
}

// Endpoint is the node address the producer's stream goes to.
func (p *Producer) Endpoint() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mu.endpoint
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
	return p.SendWithCommit(ctx, nil, messages...)
}

// SendWithCommit is Send for a frame that also carries a consumer group's
// offset commit: the commit is logged with the frame's messages or not at
// all (exactly-once from log to log; see Client.Transform).
func (p *Producer) SendWithCommit(ctx context.Context, commit *orderlogpb.GroupCommit, messages ...*orderlogpb.Message) (*Pending, error) {
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
		Messages: messages, RequestId: p.mu.nextRequestID, GroupCommit: commit,
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
	p.cancel() // first: a Send blocked on the stream's flow control holds mu
	p.mu.Lock()
	p.mu.closed = true
	p.mu.Unlock()
	<-p.done
	p.failAll(ErrProducerClosed)
}

// run keeps a stream open, resending unacknowledged frames after each break,
// until the producer is closed or has failed and every frame before the
// failed one is answered. When its node fails the producer moves to the
// next endpoint and resends there with the same (producer id, epoch, seq):
// that node takes the producer over (rebuilding its state from the old
// owner's ledgers) and answers the frames already logged as duplicates
// with their original offsets.
func (p *Producer) run() {
	defer close(p.done)
	for p.ctx.Err() == nil {
		endpoint := p.Endpoint()
		err, broken := p.serveStream(endpoint)
		if p.ctx.Err() != nil || p.finished() {
			return
		}
		var apiErr *apierr.Error
		if errors.As(err, &apiErr) && !retryable(apiErr) {
			p.setFatal(apiErr)
			return
		}
		if p.shouldMove(broken, err) {
			p.client.nodeFailed(endpoint)
			p.moveTo(p.client.endpoints.after(endpoint))
		}
		select {
		case <-time.After(p.opts.RetryBackoff):
		case <-p.ctx.Done():
			return
		}
	}
}

// retryable refusals are resent on the next stream: frames behind a failed
// one are refused as out of order, so resending all in order restores the
// sequence.
func retryable(err *apierr.Error) bool {
	return err.Class() == apierr.ClassRetry || err.Code == apierr.OutOfOrderSequence
}

// errFinished ends a stream once a failed producer has nothing left to wait for.
var errFinished = errors.New("client: producer failed; every earlier frame answered")

// shouldMove says whether the producer leaves its node after a stream
// ended with err: at once when the stream broke or could not be opened
// (the node is gone or unreachable), after moveAfterRefusals retryable
// refusals in a row when the node is up but cannot serve.
func (p *Producer) shouldMove(broken bool, err error) bool {
	if len(p.client.endpoints.list()) < 2 {
		return false
	}
	if broken {
		return nodeFailed(p.ctx, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if apierr.As(err).Class() != apierr.ClassRetry {
		return false
	}
	p.mu.refusals++
	return p.mu.refusals >= moveAfterRefusals
}

func (p *Producer) moveTo(endpoint string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mu.endpoint, p.mu.refusals = endpoint, 0
}

// serveStream runs one stream to endpoint until it ends; broken reports
// that it ended for want of the node (it could not be opened, Recv failed,
// or the node left frames unanswered and did not answer a health check
// either), not with a refusal.
func (p *Producer) serveStream(endpoint string) (err error, broken bool) {
	conn, err := p.client.endpoints.conn(endpoint)
	if err != nil {
		return err, false
	}
	ctx, cancel := context.WithCancel(p.ctx) // ends this stream's goroutines when it is done
	stream, err := orderlogpb.NewProducerClient(conn).Produce(ctx)
	if err != nil {
		cancel()
		return apierr.FromGRPC(err), true
	}
	p.heard.Store(time.Now().UnixNano())
	p.attach(stream)
	stalled := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		p.watchStream(ctx, healthpb.NewHealthClient(conn), stalled, cancel)
	}()
	defer func() {
		cancel() // first: a Send blocked on this stream holds mu
		<-watched
		p.detach()
	}()
	for {
		resp, err := stream.Recv()
		select {
		case <-stalled:
			return apierr.New(apierr.Timeout, "%s left frames unanswered for %s and did not answer a health check within %s",
				endpoint, p.opts.StallProbeAfter, p.opts.StallProbeTimeout), true
		default:
		}
		if errors.Is(err, io.EOF) { // the node ended the stream: it is stopping
			return apierr.New(apierr.Unavailable, "%s ended the produce stream", endpoint), true
		}
		if err != nil {
			return apierr.FromGRPC(err), true
		}
		p.heard.Store(time.Now().UnixNano())
		if err := p.resolve(resp); err != nil {
			return err, false
		}
	}
}

// watchStream asks the node whether it is alive (the gRPC health service)
// whenever frames have waited StallProbeAfter on a stream that answers
// nothing. A node that is only slow (waiting for a sequencer leader, a
// takeover) answers at once and keeps its producers; one that does not
// answer within StallProbeTimeout (paused, hung: its connections stay open
// and the stream never breaks) gets stalled closed and the stream ended,
// and the producer moves. Moving is always safe: the next node takes the
// producer over, fencing this one first.
func (p *Producer) watchStream(ctx context.Context, health healthpb.HealthClient, stalled chan<- struct{}, endStream func()) {
	tick := time.NewTicker(max(p.opts.StallProbeAfter/4, time.Millisecond))
	defer tick.Stop()
	var probed time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			quiet := time.Unix(0, p.heard.Load())
			if probed.After(quiet) {
				quiet = probed
			}
			if !needsProbe(len(p.slots), quiet, now, p.opts.StallProbeAfter) {
				continue
			}
			probed = now
			probeCtx, cancel := context.WithTimeout(ctx, p.opts.StallProbeTimeout)
			resp, err := health.Check(probeCtx, &healthpb.HealthCheckRequest{Service: producerService})
			cancel()
			if ctx.Err() == nil && probeFailed(resp, err) {
				close(stalled)
				endStream()
				return
			}
		}
	}
}

// needsProbe says whether a stream with inFlight unanswered frames, quiet
// (no answer, no probe) since quiet, should have its node probed at now.
func needsProbe(inFlight int, quiet, now time.Time, after time.Duration) bool {
	return inFlight > 0 && now.Sub(quiet) >= after
}

// producerService is the health service name a stalled producer probes:
// a node reports it NOT_SERVING when it cannot own producers (it lost its
// etcd registration, say behind a partition).
var producerService = orderlogpb.Producer_ServiceDesc.ServiceName

// probeFailed says whether a health check's outcome means the producer
// should move: the node did not answer, or says it cannot own producers.
// Any other answer (SERVING while it waits for a sequencer leader, an
// unknown service, no health service) comes from a live node that can:
// refusals move the producer if it cannot serve.
func probeFailed(resp *healthpb.HealthCheckResponse, err error) bool {
	switch status.Code(err) {
	case codes.DeadlineExceeded, codes.Unavailable:
		return true
	case codes.OK:
		return resp.GetStatus() == healthpb.HealthCheckResponse_NOT_SERVING
	}
	return false
}

// attach makes stream current and resends every unacknowledged frame in
// order. A failed send surfaces on Recv, with the stream's real status.
func (p *Producer) attach(stream orderlogpb.Producer_ProduceClient) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mu.stream = stream
	for _, pending := range p.mu.pending {
		_ = stream.Send(pending.request)
	}
}

func (p *Producer) detach() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mu.stream = nil
}

// finished reports a failed producer with no frame left to wait for.
func (p *Producer) finished() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.finishedLocked() != nil
}

// resolve completes the frame a response names. A retryable refusal ends
// the stream, and every unanswered frame is resent on the next one. Any
// other refusal is final for that frame and every later one (their seqs
// can no longer follow on), but not for the frames before it: the server
// may still log those, so they are waited for, on a new stream if need be,
// and answered as they are.
func (p *Producer) resolve(resp *orderlogpb.ProduceResponse) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	i := slices.IndexFunc(p.mu.pending, func(pd *Pending) bool { return pd.request.RequestId == resp.RequestId })
	if i < 0 {
		// A frame resolved on an earlier stream, or failed with an earlier
		// refusal (the frames after a refused one come back out of order:
		// ending the stream for them would lose the answers still due).
		return nil
	}
	if resp.ErrorCode != "" {
		refusal, final := p.refusalLocked(resp)
		if retryable(refusal) && !final {
			return refusal
		}
		p.setFatalLocked(refusal)
		p.failFromLocked(i, refusal)
		return p.finishedLocked()
	}
	pending := p.mu.pending[i]
	if len(resp.Acks) != len(pending.request.Messages) {
		return apierr.New(apierr.Internal, "frame %d: %d acks for %d messages", resp.RequestId, len(resp.Acks), len(pending.request.Messages))
	}
	pending.acks = resp.Acks
	p.mu.refusals = 0
	close(pending.done)
	p.mu.pending = slices.Delete(p.mu.pending, i, i+1)
	<-p.slots
	return p.finishedLocked()
}

// refusalLocked is the error a refused frame answers. OUT_OF_ORDER_SEQUENCE
// is resent in order from the oldest unacknowledged frame, which works only
// if the node expects a seq this producer still holds: a node expecting an
// older one lacks messages that were acknowledged (possible in ack mode
// leader, DESIGN.md §1), and the producer cannot go on: final.
func (p *Producer) refusalLocked(resp *orderlogpb.ProduceResponse) (refusal *apierr.Error, final bool) {
	refusal = &apierr.Error{Code: apierr.Code(resp.ErrorCode), Message: resp.ErrorMessage}
	if refusal.Code == apierr.OutOfOrderSequence && len(p.mu.pending) > 0 {
		if oldest := p.mu.pending[0].request.FirstSeq; resp.ExpectedSeq < oldest {
			refusal.Message = fmt.Sprintf("the node expects seq %d, but every seq before %d was acknowledged and is no longer held: %s",
				resp.ExpectedSeq, oldest, resp.ErrorMessage)
			return refusal.With("expected_seq", strconv.FormatUint(resp.ExpectedSeq, 10)), true
		}
	}
	return refusal, false
}

func (p *Producer) finishedLocked() error {
	if p.mu.fatal != nil && len(p.mu.pending) == 0 {
		return errFinished
	}
	return nil
}

func (p *Producer) setFatal(err error) {
	p.mu.Lock()
	p.setFatalLocked(err)
	p.mu.Unlock()
	p.failAll(err)
}

// setFatalLocked records the first error that ends the producer.
func (p *Producer) setFatalLocked(err error) {
	if p.mu.fatal == nil {
		p.mu.fatal = fmt.Errorf("producer %q: %w", p.name, err)
	}
}

func (p *Producer) failAll(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.failFromLocked(0, err)
}

// failFromLocked fails pending frames i and later with err.
func (p *Producer) failFromLocked(i int, err error) {
	for _, pending := range p.mu.pending[i:] {
		pending.err = err
		close(pending.done)
		<-p.slots
	}
	p.mu.pending = p.mu.pending[:i]
}

// NextSeq is the sequence number the next message sent will get.
func (p *Producer) NextSeq() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mu.nextSeq
}
