package sequencer

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "orderlog/proto/sequencerpb"
)

// Service is the gRPC face of a Node (proto/sequencer.proto).
type Service struct {
	pb.UnimplementedSequencerServer
	node *Node
}

// NewService serves node.
func NewService(node *Node) *Service { return &Service{node: node} }

// Register registers a service of node on srv and returns it.
func Register(srv *grpc.Server, node *Node) *Service {
	svc := NewService(node)
	pb.RegisterSequencerServer(srv, svc)
	return svc
}

// grantStream is the sequencer side of one Grant stream: an outbox the
// leader fills without blocking and a sender goroutine that drains it, many
// replies per frame.
type grantStream struct {
	id          SessionID
	incarnation string
	lease       time.Duration // carried in grant replies
	wake        chan struct{}
	done        chan struct{}
	endOnce     sync.Once
	sendMu      sync.Mutex // one Send at a time: the receiving goroutine flushes too
	// inRecv is set while the receiving goroutine feeds a frame; it flushes
	// right after, so queueing needs no wake-up of the handler goroutine.
	inRecv atomic.Bool
	// sentSinceBeat is set by every frame sent and cleared by the idle
	// heartbeat, which sends an empty frame only when it was clear.
	sentSinceBeat atomic.Bool
	mu            struct {
		sync.Mutex
		grants []GrantReply
		closes []*pb.CloseLedgerRequest
	}
}

func (s *grantStream) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *grantStream) queueGrants(g []GrantReply) {
	s.mu.Lock()
	s.mu.grants = append(s.mu.grants, g...)
	s.mu.Unlock()
	if !s.inRecv.Load() {
		s.signal()
	}
}

func (s *grantStream) queueClose(ledgerID uint64) {
	s.mu.Lock()
	s.mu.closes = append(s.mu.closes, &pb.CloseLedgerRequest{LedgerId: ledgerID})
	s.mu.Unlock()
	if !s.inRecv.Load() {
		s.signal()
	}
}

// end makes the stream's handler return (superseded, timed out, deposed).
func (s *grantStream) end() { s.endOnce.Do(func() { close(s.done) }) }

// take converts everything queued into one frame's contents, reusing the
// queue's array.
func (s *grantStream) take() ([]*pb.GrantReply, []*pb.CloseLedgerRequest) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(s.mu.grants)
	if n == 0 && len(s.mu.closes) == 0 {
		return nil, nil
	}
	// One allocation for all replies of the frame, not two per grant.
	replies := make([]pb.GrantReply, n)
	ranges := make([]pb.Range, n)
	out := make([]*pb.GrantReply, n)
	for i, g := range s.mu.grants {
		out[i] = grantToProto(&replies[i], &ranges[i], g, s.lease)
	}
	c := s.mu.closes
	s.mu.grants, s.mu.closes = s.mu.grants[:0], nil
	return out, c
}

// flush sends everything queued, in order, as one frame.
func (s *grantStream) flush(send func(*pb.SequencerFrame) error, epoch uint64) error {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	grants, closes := s.take()
	if len(grants)+len(closes) == 0 {
		return nil
	}
	s.sentSinceBeat.Store(true)
	return send(&pb.SequencerFrame{Epoch: epoch, Grants: grants, Close: closes})
}

// Grant implements the grant session of one ingest incarnation.
func (svc *Service) Grant(stream grpc.BidiStreamingServer[pb.IngestFrame, pb.SequencerFrame]) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	if first.Hello == nil || first.Hello.Incarnation == "" {
		return status.Error(codes.InvalidArgument, ErrNoHello.Error())
	}
	l := svc.node.leader()
	if l == nil {
		return status.Error(codes.Unavailable, ErrNotLeader.Error())
	}
	s := &grantStream{
		id: svc.node.newSessionID(), incarnation: first.Hello.Incarnation,
		wake: make(chan struct{}, 1), done: make(chan struct{}), lease: svc.node.cfg.Machine.GrantLease,
	}
	if err := l.openSession(s, first.Hello.LeaseId); err != nil {
		return status.Error(codes.Unavailable, err.Error())
	}
	defer l.closeSession(s)
	// The first frame says the session is accepted (even when it carries
	// nothing else): an ingest node whose grants were refused while it had
	// no session opens its next ledger at once then.
	if err := stream.Send(&pb.SequencerFrame{Epoch: l.epoch}); err != nil {
		return err
	}
	s.inRecv.Store(true)
	l.onFrame(s, first)
	s.inRecv.Store(false)
	if err := s.flush(stream.Send, l.epoch); err != nil {
		return err
	}

	recvErr := make(chan error, 1)
	go func() {
		for {
			f, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			s.inRecv.Store(true)
			l.onFrame(s, f)
			s.inRecv.Store(false)
			// Replies to this frame usually exist now: send them from
			// here, saving a hand-off to the handler goroutine.
			if err := s.flush(stream.Send, l.epoch); err != nil {
				recvErr <- err
				return
			}
		}
	}()
	heartbeat := time.NewTicker(GrantStreamHeartbeat)
	defer heartbeat.Stop()
	for {
		select {
		case err := <-recvErr:
			return err
		case <-s.done:
			return status.Error(codes.Unavailable, "sequencer: session ended")
		case <-l.ctx.Done():
			return status.Error(codes.Unavailable, ErrNotLeader.Error())
		case <-stream.Context().Done():
			return stream.Context().Err()
		case <-s.wake:
			if err := s.flush(stream.Send, l.epoch); err != nil {
				return err
			}
		case <-heartbeat.C:
			if err := s.heartbeat(stream.Send, l.epoch); err != nil {
				return err
			}
		}
	}
}

// GrantStreamHeartbeat is how often the leader sends an empty frame on a
// grant stream on which it sent nothing else: an ingest node takes a
// stream silent for its grant-stream silence timeout (default 2 s, many
// heartbeats) for a dead or frozen leader, whose TCP connection may stay
// up for hours.
const GrantStreamHeartbeat = 250 * time.Millisecond

// heartbeat sends an empty frame unless a frame went out since the last
// heartbeat.
func (s *grantStream) heartbeat(send func(*pb.SequencerFrame) error, epoch uint64) error {
	if s.sentSinceBeat.Swap(false) {
		return nil
	}
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	return send(&pb.SequencerFrame{Epoch: epoch})
}

// CommitMapHeartbeat is how often a commit-map stream carries an empty
// frame, whatever else it sends: readers take a stream silent for several
// heartbeats for a dead leader (reader.FollowSilence).
const CommitMapHeartbeat = time.Second

// CommitMap streams confirmed commit records from req.FromOffset, then live.
func (svc *Service) CommitMap(req *pb.CommitMapRequest, stream grpc.ServerStreamingServer[pb.CommitMapFrame]) error {
	l := svc.node.leader()
	if l == nil {
		return status.Error(codes.Unavailable, ErrNotLeader.Error())
	}
	sub, snap, err := l.cm.subscribe(req.FromOffset)
	switch {
	case errors.Is(err, ErrBelowRetention):
		return status.Error(codes.OutOfRange, err.Error())
	case err != nil:
		return status.Error(codes.Unavailable, err.Error())
	}
	defer l.cm.unsubscribe(sub)
	heartbeat := time.NewTicker(CommitMapHeartbeat)
	defer heartbeat.Stop()
	const chunk = 1024
	for len(snap) > 0 {
		n := min(chunk, len(snap))
		if err := stream.Send(commitFrame(l.epoch, snap[:n])); err != nil {
			return err
		}
		snap = snap[n:]
	}
	for {
		select {
		case recs, ok := <-sub.ch:
			if !ok {
				return status.Error(codes.Unavailable, "sequencer: commit map subscription ended (slow reader or leader change)")
			}
			if err := stream.Send(commitFrame(l.epoch, recs)); err != nil {
				return err
			}
		case <-heartbeat.C:
			// An empty frame: it changes nothing and tells the reader
			// this leader still serves (a frozen or cut-off one sends
			// nothing, and its TCP connection may stay up for hours).
			if err := stream.Send(&pb.CommitMapFrame{Epoch: l.epoch}); err != nil {
				return err
			}
		case <-stream.Context().Done():
			return stream.Context().Err()
		}
	}
}

func commitFrame(epoch uint64, recs []EpochRecord) *pb.CommitMapFrame {
	f := &pb.CommitMapFrame{Epoch: epoch, Records: make([]*pb.CommitRecord, len(recs))}
	for i, r := range recs {
		f.Records[i] = RecordToProto(r)
	}
	return f
}

// RecordToProto converts a commit record for the commit-map stream.
func RecordToProto(r EpochRecord) *pb.CommitRecord {
	out := &pb.CommitRecord{Epoch: r.Epoch}
	switch r.Kind {
	case KindWritten:
		out.Kind, out.LedgerId, out.EntryId = pb.RecordKind_WRITTEN, r.Ledger, r.Entry
		out.Range = &pb.Range{First: r.Range.First, End: r.Range.End}
	case KindHole:
		out.Kind = pb.RecordKind_HOLE
		out.Range = &pb.Range{First: r.Range.First, End: r.Range.End}
	case KindWatermark:
		out.Kind, out.Watermark = pb.RecordKind_WATERMARK, r.Watermark
	}
	return out
}

// RecordFromProto converts a commit-map stream record back.
func RecordFromProto(p *pb.CommitRecord) EpochRecord {
	r := EpochRecord{Epoch: p.Epoch}
	switch p.Kind {
	case pb.RecordKind_WRITTEN:
		r.Kind, r.Ledger, r.Entry, r.Range = KindWritten, p.LedgerId, p.EntryId, rangeFromProto(p.Range)
	case pb.RecordKind_HOLE:
		r.Kind, r.Range = KindHole, rangeFromProto(p.Range)
	case pb.RecordKind_WATERMARK:
		r.Kind, r.Watermark = KindWatermark, p.Watermark
	}
	return r
}
