package ingest

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"orderlog/ingest/batch"
	"orderlog/ingest/coordinator"
	"orderlog/ingest/ledger"
	"orderlog/ingest/producer"
	"orderlog/internal/apierr"
	"orderlog/internal/grpcopt"
	"orderlog/internal/keys"
	"orderlog/proto/ingestpb"
)

// Handing a producer over between live nodes (DESIGN.md §6). The node
// that took a producer over in etcd asks the previous owner to Release it;
// only if that owner does not answer in time, or cannot, is its etcd lease
// revoked (fenceOwner), which costs it every producer it owns.

// DefaultReleaseTimeout bounds a Release call before the new owner falls
// back to revoking the previous owner's lease. A release waits for the
// producer's messages in flight, which may wait for a store that stopped
// answering (DefaultUnreachableAfter) and a ledger roll: it is longer.
const DefaultReleaseTimeout = 3 * time.Second

// releaseProbeTimeout bounds the health check a Release call runs beside
// it: an owner that does not answer one (paused, cut off) is fenced at
// once rather than after the whole ReleaseTimeout, which is there for a
// live owner still settling the producer's last batch.
const releaseProbeTimeout = time.Second

// Release hands producer id over to the node that took it over in etcd:
// owner must be this node's current incarnation. It returns once none of
// the producer's messages is in flight here, with its state, or at once
// with NotHeld; this node logs nothing more for it.
func (n *Node) Release(ctx context.Context, id uint64, owner string) (coordinator.ProducerReleased, error) {
	answer := make(chan coordinator.ProducerReleased, 1)
	var token uint64
	var refused error
	if !n.do(func() {
		if n.reg.incarnation != owner {
			refused = status.Errorf(codes.FailedPrecondition, "incarnation %s is not this node's (%s)", owner, n.reg.incarnation)
			answer <- coordinator.ProducerReleased{}
			return
		}
		n.nextInit++
		token = n.nextInit
		n.releaseWaiters[token] = answer
		n.machine.ReleaseProducer(id, token)
	}) {
		return coordinator.ProducerReleased{}, status.Error(codes.Unavailable, "ingest node is shutting down")
	}
	select {
	case done := <-answer:
		if refused != nil {
			return done, refused
		}
		return done, done.Err
	case <-ctx.Done():
		n.do(func() { delete(n.releaseWaiters, token) })
		return coordinator.ProducerReleased{}, status.FromContextError(ctx.Err()).Err()
	}
}

// answerRelease hands a Release its answer.
func (n *Node) answerRelease(done coordinator.ProducerReleased) {
	if waiter, ok := n.releaseWaiters[done.Token]; ok {
		delete(n.releaseWaiters, done.Token)
		waiter <- done
	}
	switch {
	case done.NotHeld:
		n.logger.Info("ingest: gave a producer up to its next owner", "producer", done.Producer)
	case done.Err == nil:
		n.logger.Info("ingest: released a producer to its next owner", "producer", done.Producer, "next_seq", done.State.DurableNext)
	}
}

// holders are the incarnations that may still log the producer: its
// previous owner and the writer of its state ledger. They differ when an
// owner took the producer over and died before it settled: the writer of
// the state ledger was then asked to release it, may still be doing so,
// and no record names it any more.
func (n *Node) holders(ctx context.Context, previous string, stateLedger uint64) ([]string, error) {
	holders := []string{previous}
	if stateLedger == 0 {
		return holders, nil
	}
	m, err := ledger.Get(ctx, n.etcd, stateLedger)
	if err != nil {
		// Going on without the state ledger's writer could leave it
		// logging the producer: the takeover fails and is retried.
		return nil, apierr.New(apierr.Unavailable, "read the producer's state ledger %d: %v", stateLedger, err)
	}
	if m.WriterIncarnation != previous {
		holders = append(holders, m.WriterIncarnation)
	}
	return holders, nil
}

// handOver makes sure none of the producer's holders logs anything more for
// it before this node takes its frames: each is asked to Release it and,
// if that fails, its lease is revoked. It returns the state a holder
// released, or nil when the state must be rebuilt from the ledgers (no
// holder left, or one was fenced). A holder releases state only if it
// settled the producer, and at most one session anywhere is settled for it
// (a settled session's node owned it until this takeover), so at most one
// holder answers with state.
func (n *Node) handOver(ctx context.Context, id uint64, holders []string, self string) (*producer.State, error) {
	var released *producer.State
	for _, h := range holders {
		state, err := n.handOverFrom(ctx, id, h, self)
		if err != nil {
			return nil, err
		}
		if released == nil {
			released = state
		}
	}
	return released, nil
}

// handOverFrom asks one holder to release the producer, or fences it.
func (n *Node) handOverFrom(ctx context.Context, id uint64, previous, self string) (*producer.State, error) {
	if previous == "" || previous == self {
		return nil, nil
	}
	resp, err := n.etcd.Get(ctx, keys.Ingest(previous))
	if err != nil {
		return nil, fmt.Errorf("look up the previous owner %s: %w", previous, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, nil // its lease expired or was revoked already
	}
	addr := string(resp.Kvs[0].Value)
	state, err := n.askRelease(ctx, addr, id, previous, self)
	if err == nil {
		return state, nil
	}
	if status.Code(err) == codes.Aborted {
		// The record names another owner than this node by now: this
		// takeover is stale and must fence nobody.
		return nil, finalTakeoverError{apierr.New(apierr.Unavailable, "take over producer %d: %v", id, err)}
	}
	n.logger.Info("ingest: the previous owner did not release the producer; fencing it", "producer", id,
		"previous", previous, "addr", addr, "err", err)
	return nil, n.fenceOwner(ctx, previous, self)
}

// askRelease calls Release on the previous owner at addr. A nil state
// means the previous owner did not hold the producer.
func (n *Node) askRelease(ctx context.Context, addr string, id uint64, previous, self string) (*producer.State, error) {
	if addr == "" {
		return nil, errors.New("the previous owner published no address")
	}
	conn, err := grpc.NewClient(addr, grpcopt.DialOptionsWith(n.cfg.PeerCredentials)...)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, n.cfg.ReleaseTimeout)
	defer cancel()
	var unresponsive atomic.Bool
	go func() { // a paused or cut-off owner is fenced now, not after ReleaseTimeout
		pctx, pcancel := context.WithTimeout(ctx, releaseProbeTimeout)
		defer pcancel()
		_, err := healthpb.NewHealthClient(conn).Check(pctx, &healthpb.HealthCheckRequest{})
		if code := status.Code(err); (code == codes.DeadlineExceeded || code == codes.Unavailable) && ctx.Err() == nil {
			unresponsive.Store(true)
			cancel()
		}
	}()
	resp, err := ingestpb.NewIngestPeerClient(conn).Release(ctx, &ingestpb.ReleaseRequest{ProducerId: id, Owner: previous, NewOwner: self})
	if err != nil {
		if unresponsive.Load() {
			return nil, fmt.Errorf("no answer to a health check within %v: %w", releaseProbeTimeout, err)
		}
		return nil, err
	}
	if resp.NotHeld {
		return nil, nil
	}
	b := coordinator.NewStateBuilder(id, n.cfg.DedupWindow)
	if err := b.Apply(resp.State); err != nil {
		return nil, fmt.Errorf("released state: %w", err)
	}
	state := b.State()
	return &state, nil
}

// PeerService serves ingestpb.IngestPeer for a node.
type PeerService struct {
	ingestpb.UnimplementedIngestPeerServer
	node *Node
}

// NewPeerService returns the node's IngestPeer service.
func NewPeerService(n *Node) *PeerService { return &PeerService{node: n} }

// Register adds the service to srv.
func (s *PeerService) Register(srv *grpc.Server) { ingestpb.RegisterIngestPeerServer(srv, s) }

// Release implements ingestpb.IngestPeerServer. A caller the producer
// record no longer names as the owner is refused (ABORTED): a delayed
// Release must not take the producer from a node it came back to.
func (s *PeerService) Release(ctx context.Context, req *ingestpb.ReleaseRequest) (*ingestpb.ReleaseResponse, error) {
	rec, _, err := getProducer(ctx, s.node.etcd, req.ProducerId)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "read producer %d: %v", req.ProducerId, err)
	}
	if rec.Owner != req.NewOwner {
		return nil, status.Errorf(codes.Aborted, "producer %d is owned by %s, not the caller %s", req.ProducerId, rec.Owner, req.NewOwner)
	}
	released, err := s.node.Release(ctx, req.ProducerId, req.Owner)
	if err != nil {
		if _, ok := status.FromError(err); !ok {
			err = status.Error(codes.Unavailable, err.Error())
		}
		return nil, err
	}
	if released.NotHeld {
		return &ingestpb.ReleaseResponse{NotHeld: true}, nil
	}
	payload, err := batch.EncodeSnapshot(nil, time.Now().UnixMicro(), []producer.State{released.State})
	if err != nil {
		return nil, status.Errorf(codes.Internal, "encode the state of producer %d: %v", req.ProducerId, err)
	}
	s.node.logger.Debug("ingest: producer handed over", "producer", req.ProducerId, "to", req.NewOwner)
	return &ingestpb.ReleaseResponse{State: payload}, nil
}
