package ingest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	"orderlog/ingest/pipeline"
	"orderlog/internal/apierr"
	"orderlog/internal/grpcopt"
	"orderlog/internal/keys"
	pb "orderlog/proto/sequencerpb"
	"orderlog/sequencer"
)

// SequencerSession is the GrantSession over the sequencer leader's Grant
// stream. It finds the leader in etcd, keeps one stream open, reconnects
// after failures, and answers every grant it could not get with an error
// (so the node closes that ledger and opens another). A grant asked while
// it has no stream waits for the next one, up to grantHoldLimit: during a
// leader's takeover, refusing at once made every node close a ledger and
// open another every few hundred milliseconds (more etcd writes and store
// fsyncs just when the new leader needs them, and more ledgers for every
// later takeover to list).
type SequencerSession struct {
	etcd        *clientv3.Client
	local       LocalSequencer
	opts        SessionOptions
	incarnation string
	leaseID     int64
	onClose     func(ledgerID uint64)
	replies     chan GrantReply
	stop        chan struct{}
	done        chan struct{} // run has returned
	expireDone  chan struct{} // expireHeld has returned

	mu struct {
		sync.Mutex
		client      *sequencer.GrantClient
		conn        *grpc.ClientConn
		epoch       int64
		streams     uint64       // grant streams a leader accepted
		outstanding []GrantReply // requested, not yet answered, in order
		// held are the grants asked while there was no stream, in order;
		// empty while client is set (sendHeldLocked empties it when a
		// stream comes). With outstanding, bounded by the pipeline's
		// grants in flight, which the replies channel is sized for.
		held   []heldGrant
		closed bool
	}
}

// heldGrant is a grant asked while the session had no stream.
type heldGrant struct {
	batchID, ledger uint64
	count           int
	asked           time.Time
}

// grantHoldLimit is how long a grant asked without a stream waits for one
// before it is refused: longer than a leader's detection and takeover take
// (about 2 + 1 s), short enough that a session that cannot reach any
// leader soon hands its ledger back.
const grantHoldLimit = 5 * time.Second

// LocalSequencer returns in-process Grant streams to the sequencer leader
// at addr when that leader runs in this process, else nil.
type LocalSequencer func(addr string) sequencer.GrantStreamer

// SessionOptions tune how a session notices a dead or frozen leader.
type SessionOptions struct {
	// Silence is how long the stream may carry nothing — no grant, no close
	// request, no heartbeat (the leader sends one every
	// sequencer.GrantStreamHeartbeat while idle) — before the session drops
	// it and finds the leader again. Default DefaultGrantStreamSilence.
	Silence time.Duration
	// Heard, if set, is told of the leader's frames (at most every
	// heardNoteEvery), for the process's sequencer standby.
	Heard *sequencer.LeaderHeard
	// Credentials are how the session dials the leader; nil: plaintext.
	Credentials credentials.TransportCredentials
}

// heardNoteEvery spaces the notes to Heard: frames come with every grant.
const heardNoteEvery = 50 * time.Millisecond

// grantKeepalive pings the leader's connection after this long without
// any frame from it, and drops the connection if the ping is not answered
// within grantKeepaliveTimeout: it catches a dead connection even where
// the silence timeout would not (gRPC's floor for the ping time is 10 s).
const (
	grantKeepaliveTime    = 10 * time.Second
	grantKeepaliveTimeout = 5 * time.Second
)

// NewSequencerSession starts the session. onClose is called (from the
// session's goroutine) when the sequencer asks a ledger to be closed. local
// may be nil.
func NewSequencerSession(etcd *clientv3.Client, local LocalSequencer, opts SessionOptions, incarnation string, leaseID int64, onClose func(uint64)) *SequencerSession {
	if opts.Silence <= 0 {
		opts.Silence = DefaultGrantStreamSilence
	}
	s := &SequencerSession{etcd: etcd, local: local, opts: opts, incarnation: incarnation, leaseID: leaseID, onClose: onClose,
		replies: make(chan GrantReply, 4096), stop: make(chan struct{}), done: make(chan struct{}), expireDone: make(chan struct{})}
	go s.run()
	go s.expireHeld()
	return s
}

// SequencerSessions is the GrantSessionFactory of real nodes; local (may be
// nil) finds a leader in this process.
func SequencerSessions(etcd *clientv3.Client, local LocalSequencer, opts SessionOptions) GrantSessionFactory {
	return func(incarnation string, leaseID int64, onClose func(uint64)) GrantSession {
		return NewSequencerSession(etcd, local, opts, incarnation, leaseID, onClose)
	}
}

// Epoch is the newest sequencer epoch the session knows.
func (s *SequencerSession) Epoch() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.epoch
}

// Streams counts the grant streams a leader accepted (sent a frame on).
func (s *SequencerSession) Streams() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.streams
}

// Replies delivers grant answers in request order.
func (s *SequencerSession) Replies() <-chan GrantReply { return s.replies }

// Grant asks for count offsets; without a stream it waits for one (at
// most grantHoldLimit).
func (s *SequencerSession) Grant(batchID, ledger uint64, count int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.mu.closed:
		s.refuseLocked(batchID, ledger, "sequencer session closed")
		return
	case s.mu.client == nil:
		s.mu.held = append(s.mu.held, heldGrant{batchID: batchID, ledger: ledger, count: count, asked: time.Now()})
		return
	}
	s.sendLocked(batchID, ledger, count)
}

func (s *SequencerSession) sendLocked(batchID, ledger uint64, count int) {
	s.mu.outstanding = append(s.mu.outstanding, GrantReply{BatchID: batchID, Ledger: ledger})
	s.mu.client.Grant(batchID, ledger, uint64(count))
}

// refuseLocked answers a grant that was never asked of a leader.
func (s *SequencerSession) refuseLocked(batchID, ledger uint64, why string) {
	s.replyLocked(GrantReply{BatchID: batchID, Ledger: ledger, Err: apierr.New(apierr.Unavailable, "%s", why)})
}

// sendHeldLocked asks the new stream's leader for the held grants.
func (s *SequencerSession) sendHeldLocked() {
	for _, h := range s.mu.held {
		s.sendLocked(h.batchID, h.ledger, h.count)
	}
	s.mu.held = nil
}

// expireHeld refuses held grants older than grantHoldLimit until the
// session closes.
func (s *SequencerSession) expireHeld() {
	defer close(s.expireDone)
	t := time.NewTicker(grantHoldLimit / 20)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case now := <-t.C:
			s.mu.Lock()
			for len(s.mu.held) > 0 && now.Sub(s.mu.held[0].asked) >= grantHoldLimit {
				s.refuseLocked(s.mu.held[0].batchID, s.mu.held[0].ledger, fmt.Sprintf("no sequencer session for %v", grantHoldLimit))
				s.mu.held = s.mu.held[1:]
			}
			s.mu.Unlock()
		}
	}
}

// Written reports a confirmed entry.
func (s *SequencerSession) Written(ledger uint64, entry int64, span pipeline.Span) {
	s.withClient(func(c *sequencer.GrantClient) {
		c.Written(ledger, entry, sequencer.Range{First: span.First, End: span.End})
	})
}

// Unused reports a grant never written.
func (s *SequencerSession) Unused(ledger uint64, span pipeline.Span) {
	s.withClient(func(c *sequencer.GrantClient) { c.Unused(ledger, sequencer.Range{First: span.First, End: span.End}) })
}

// LedgerClosed reports a ledger this node closed.
func (s *SequencerSession) LedgerClosed(ledger uint64) {
	s.withClient(func(c *sequencer.GrantClient) { c.LedgerClosed(ledger) })
}

// withClient sends a report if a stream is open. A report lost with a
// stream is not needed for safety: the sequencer closes the session's
// ledgers and learns their entries from the stores.
func (s *SequencerSession) withClient(fn func(*sequencer.GrantClient)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.client != nil {
		fn(s.mu.client)
	}
}

// Close ends the session.
func (s *SequencerSession) Close() {
	close(s.stop)
	<-s.done
	<-s.expireDone
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mu.closed = true
	for _, h := range s.mu.held {
		s.refuseLocked(h.batchID, h.ledger, "sequencer session closed")
	}
	s.mu.held = nil
}

func (s *SequencerSession) run() {
	defer close(s.done)
	for {
		if err := s.serve(); err != nil {
			s.dropStream(err)
		}
		select {
		case <-s.stop:
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// serve connects to the current leader and relays its frames until the
// stream ends.
func (s *SequencerSession) serve() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	leader, err := sequencer.Leader(ctx, s.etcd)
	addr := leader.Addr
	if err == nil && addr == "" {
		err = fmt.Errorf("no sequencer leader")
	}
	var epoch int64
	if err == nil {
		epoch, err = readEpoch(ctx, s.etcd)
	}
	cancel()
	if err != nil {
		return err
	}
	var conn *grpc.ClientConn // nil for an in-process leader
	var streams sequencer.GrantStreamer
	if s.local != nil {
		streams = s.local(addr)
	}
	if streams == nil {
		ping := grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: grantKeepaliveTime, Timeout: grantKeepaliveTimeout})
		if conn, err = grpc.NewClient(addr, append(grpcopt.DialOptionsWith(s.opts.Credentials), ping)...); err != nil {
			return err
		}
		streams = pb.NewSequencerClient(conn)
	}
	streamCtx, cancelStream := context.WithCancelCause(context.Background())
	defer cancelStream(nil)
	go s.dropWhenDeposed(streamCtx, leader, cancelStream)
	client, err := sequencer.DialGrant(streamCtx, streams, s.incarnation, s.leaseID)
	if err != nil {
		if conn != nil {
			conn.Close()
		}
		if cause := context.Cause(streamCtx); cause != nil {
			return cause
		}
		return err
	}
	s.mu.Lock()
	s.mu.client, s.mu.conn, s.mu.epoch = client, conn, max(s.mu.epoch, epoch)
	s.sendHeldLocked()
	s.mu.Unlock()
	return s.relay(streamCtx, client, addr)
}

// errLeaderDeposed ends a stream whose leader's election key is gone: it
// was evicted (paused, cut off) or resigned, and a stream to it, or one
// still being set up, would only wait for the silence timeout.
var errLeaderDeposed = errors.New("sequencer leader deposed: its election key is gone")

// dropWhenDeposed cancels the stream to leader once its election key is
// deleted, watching from the revision it was read at, until ctx ends. A
// watch etcd cannot serve leaves the stream to the silence timeout.
func (s *SequencerSession) dropWhenDeposed(ctx context.Context, leader sequencer.LeaderKey, cancel context.CancelCauseFunc) {
	for resp := range s.etcd.Watch(ctx, leader.Key, clientv3.WithRev(leader.Revision+1)) {
		if resp.Err() != nil { // compacted, say: the silence timeout stays
			return
		}
		for _, ev := range resp.Events {
			if ev.Type == clientv3.EventTypeDelete {
				cancel(errLeaderDeposed)
				return
			}
		}
	}
}

// relay hands the stream's frames to onFrame until the stream ends, the
// session closes, ctx ends (the leader was deposed), or nothing arrived for opts.Silence (a dead or frozen
// leader, or a cut connection that TCP has not noticed).
func (s *SequencerSession) relay(ctx context.Context, client *sequencer.GrantClient, addr string) error {
	silence := time.NewTimer(s.opts.Silence)
	defer silence.Stop()
	var noted time.Time
	accepted := false // the leader sends a frame at once when it accepts the session
	for {
		select {
		case <-s.stop:
			client.Close()
			return fmt.Errorf("session closed")
		case <-ctx.Done(): // frames still buffered are dropped: their grants become holes (invariant H)
			client.Close()
			return context.Cause(ctx)
		case <-silence.C:
			client.Close()
			return fmt.Errorf("%w: nothing for %s", ErrGrantStreamSilent, s.opts.Silence)
		case f, ok := <-client.Frames():
			if !ok {
				return fmt.Errorf("grant stream ended: %v", client.Err())
			}
			silence.Reset(s.opts.Silence)
			if s.opts.Heard != nil {
				if now := time.Now(); now.Sub(noted) >= heardNoteEvery {
					s.opts.Heard.Note(addr, now)
					noted = now
				}
			}
			if !accepted {
				accepted = true
				s.mu.Lock()
				s.mu.streams++
				s.mu.Unlock()
			}
			s.onFrame(f)
		}
	}
}

// ErrGrantStreamSilent is why a session dropped a stream on which the
// leader sent nothing, not even a heartbeat, for SessionOptions.Silence.
var ErrGrantStreamSilent = errors.New("ingest: grant stream silent")

func (s *SequencerSession) onFrame(f *pb.SequencerFrame) {
	s.mu.Lock()
	s.mu.epoch = max(s.mu.epoch, int64(f.Epoch))
	for _, g := range f.Grants {
		s.answerLocked(g)
	}
	s.mu.Unlock()
	for _, c := range f.Close {
		s.onClose(c.LedgerId)
	}
}

// answerLocked matches a reply to the oldest outstanding request; replies
// come in request order, so anything before it was lost and is refused.
func (s *SequencerSession) answerLocked(g *pb.GrantReply) {
	for len(s.mu.outstanding) > 0 {
		req := s.mu.outstanding[0]
		s.mu.outstanding = s.mu.outstanding[1:]
		if req.BatchID != g.RequestId {
			s.replyLocked(GrantReply{BatchID: req.BatchID, Ledger: req.Ledger, Err: apierr.New(apierr.Unavailable, "grant lost")})
			continue
		}
		if g.Status != pb.GrantStatus_GRANTED {
			req.Err = apierr.New(apierr.Unavailable, "grant refused: %s", g.Status)
		} else {
			req.First = g.Range.GetFirst()
		}
		s.replyLocked(req)
		return
	}
}

// dropStream forgets the stream and refuses every outstanding grant.
func (s *SequencerSession) dropStream(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.conn != nil {
		s.mu.conn.Close()
	}
	s.mu.client, s.mu.conn = nil, nil
	for _, req := range s.mu.outstanding {
		req.Err = apierr.New(apierr.Unavailable, "sequencer session lost: %v", err)
		s.replyLocked(req)
	}
	s.mu.outstanding = nil
}

// replyLocked queues a reply. The channel is sized for every grant the
// pipeline can have in flight, so this does not block in practice.
func (s *SequencerSession) replyLocked(r GrantReply) {
	s.replies <- r
}

func readEpoch(ctx context.Context, cli *clientv3.Client) (int64, error) {
	resp, err := cli.Get(ctx, keys.SeqEpoch)
	if err != nil {
		return 0, err
	}
	if len(resp.Kvs) == 0 {
		return 0, fmt.Errorf("no sequencer epoch yet")
	}
	return strconv.ParseInt(string(resp.Kvs[0].Value), 10, 64)
}
