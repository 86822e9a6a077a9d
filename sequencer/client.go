package sequencer

import (
	"context"
	"sync"
	"time"

	"google.golang.org/grpc"

	"orderlog/internal/localstream"
	pb "orderlog/proto/sequencerpb"
)

// GrantClient is the ingest side of one Grant stream: it sends Hello,
// batches requests and reports into frames, and sends a heartbeat every
// HeartbeatInterval while idle. Calls never block on the network.
type GrantClient struct {
	stream grpc.BidiStreamingClient[pb.IngestFrame, pb.SequencerFrame]
	cancel context.CancelFunc
	wake   chan struct{}
	frames chan *pb.SequencerFrame
	done   chan struct{}
	mu     struct {
		sync.Mutex
		next *pb.IngestFrame
		err  error
	}
}

// HeartbeatInterval is how often an idle grant stream sends a heartbeat.
const HeartbeatInterval = 100 * time.Millisecond

// GrantStreamer opens Grant streams: pb.NewSequencerClient(conn) over the
// network, LocalGrants in the leader's own process.
type GrantStreamer interface {
	Grant(ctx context.Context, opts ...grpc.CallOption) (grpc.BidiStreamingClient[pb.IngestFrame, pb.SequencerFrame], error)
}

// LocalGrants opens Grant streams straight to svc, in process: an ingest
// node beside the sequencer leader (`orderlog dev`) then gets its grants
// without marshalling, HTTP/2 and two loopback socket hops per round trip.
// Frames are handed over by pointer; neither side changes a frame after
// sending it, and the service keeps none after handling it.
func LocalGrants(svc *Service) GrantStreamer { return localGrants{svc} }

type localGrants struct{ svc *Service }

func (l localGrants) Grant(ctx context.Context, _ ...grpc.CallOption) (grpc.BidiStreamingClient[pb.IngestFrame, pb.SequencerFrame], error) {
	p := localstream.New[pb.IngestFrame, pb.SequencerFrame](ctx)
	go func() { p.ServerDone(l.svc.Grant(p.Server())) }()
	return p.Client(), nil
}

// DialGrant opens a grant session through streams for an ingest
// incarnation whose liveness key is bound to leaseID.
func DialGrant(ctx context.Context, streams GrantStreamer, incarnation string, leaseID int64) (*GrantClient, error) {
	sctx, cancel := context.WithCancel(ctx)
	stream, err := streams.Grant(sctx)
	if err != nil {
		cancel()
		return nil, err
	}
	c := &GrantClient{stream: stream, cancel: cancel, wake: make(chan struct{}, 1),
		frames: make(chan *pb.SequencerFrame, 1024), done: make(chan struct{})}
	c.mu.next = &pb.IngestFrame{Hello: &pb.Hello{Incarnation: incarnation, LeaseId: leaseID}}
	go c.sendLoop()
	go c.recvLoop()
	c.signal()
	return c, nil
}

func (c *GrantClient) signal() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *GrantClient) add(fn func(f *pb.IngestFrame)) {
	c.mu.Lock()
	if c.mu.next == nil {
		c.mu.next = &pb.IngestFrame{}
	}
	fn(c.mu.next)
	c.mu.Unlock()
	c.signal()
}

// Grant asks for count offsets bound to ledgerID; the reply carries requestID.
func (c *GrantClient) Grant(requestID, ledgerID, count uint64) {
	c.add(func(f *pb.IngestFrame) {
		f.Grants = append(f.Grants, &pb.GrantRequest{RequestId: requestID, LedgerId: ledgerID, Count: count})
	})
}

// Written reports that entry of ledgerID holds r and is confirmed.
func (c *GrantClient) Written(ledgerID uint64, entry int64, r Range) {
	c.add(func(f *pb.IngestFrame) {
		f.Written = append(f.Written, &pb.Written{LedgerId: ledgerID, EntryId: entry, Range: &pb.Range{First: r.First, End: r.End}})
	})
}

// Unused reports a grant for which no AddEntry was ever sent.
func (c *GrantClient) Unused(ledgerID uint64, r Range) {
	c.add(func(f *pb.IngestFrame) {
		f.Unused = append(f.Unused, &pb.Unused{LedgerId: ledgerID, Range: &pb.Range{First: r.First, End: r.End}})
	})
}

// LedgerClosed tells the sequencer the writer closed ledgerID.
func (c *GrantClient) LedgerClosed(ledgerID uint64) {
	c.add(func(f *pb.IngestFrame) { f.Closed = append(f.Closed, &pb.LedgerClosed{LedgerId: ledgerID}) })
}

// Frames delivers the sequencer's frames (grant replies in request order,
// close requests); it is closed when the stream ends.
func (c *GrantClient) Frames() <-chan *pb.SequencerFrame { return c.frames }

// Done is closed when the stream has ended; Err says why.
func (c *GrantClient) Done() <-chan struct{} { return c.done }

// Err is why the stream ended.
func (c *GrantClient) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.err
}

// Close ends the stream.
func (c *GrantClient) Close() { c.cancel() }

func (c *GrantClient) fail(err error) {
	c.mu.Lock()
	if c.mu.err == nil {
		c.mu.err = err
	}
	c.mu.Unlock()
	c.cancel()
}

func (c *GrantClient) sendLoop() {
	hb := time.NewTicker(HeartbeatInterval)
	defer hb.Stop()
	sent := false
	for {
		select {
		case <-c.done:
			return
		case <-c.wake:
		case <-hb.C:
			if sent {
				sent = false
				continue
			}
			c.add(func(f *pb.IngestFrame) { f.Heartbeat = true })
			continue
		}
		c.mu.Lock()
		f := c.mu.next
		c.mu.next = nil
		c.mu.Unlock()
		if f == nil {
			continue
		}
		if err := c.stream.Send(f); err != nil {
			c.fail(err)
			return
		}
		sent = true
	}
}

func (c *GrantClient) recvLoop() {
	defer close(c.done)
	defer close(c.frames)
	for {
		f, err := c.stream.Recv()
		if err != nil {
			c.fail(err)
			return
		}
		c.frames <- f
	}
}
