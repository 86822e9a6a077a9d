package ingest

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"orderlog/internal/etcdtest"
	"orderlog/internal/keys"
	"orderlog/internal/localstream"
	pb "orderlog/proto/sequencerpb"
	"orderlog/sequencer"
)

// frozenLeader opens grant streams that read every frame and never answer,
// as a frozen (SIGSTOPped) leader's still-open connection does.
type frozenLeader struct {
	opened chan struct{}
}

func (f frozenLeader) Grant(ctx context.Context, _ ...grpc.CallOption) (grpc.BidiStreamingClient[pb.IngestFrame, pb.SequencerFrame], error) {
	p := localstream.New[pb.IngestFrame, pb.SequencerFrame](ctx)
	go func() {
		server := p.Server()
		for {
			if _, err := server.Recv(); err != nil {
				p.ServerDone(err)
				return
			}
		}
	}()
	f.opened <- struct{}{}
	return p.Client(), nil
}

// TestSilentGrantStreamIsDroppedAndItsGrantsRefused: a leader that sends
// nothing, not even a heartbeat, for the silence timeout has its stream
// dropped; the grant waiting on it is refused (so the node closes that
// ledger) and the session dials the leader again.
func TestSilentGrantStreamIsDroppedAndItsGrantsRefused(t *testing.T) {
	cli := etcdtest.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	electFrozenLeader(ctx, t, cli)
	leader := frozenLeader{opened: make(chan struct{}, 16)}
	local := func(string) sequencer.GrantStreamer { return leader }
	s := NewSequencerSession(cli, local, SessionOptions{Silence: time.Second}, "ingest-1", 0, func(uint64) {})
	defer s.Close()

	waitOpened(ctx, t, leader.opened)
	waitStream(ctx, t, s)
	s.Grant(1, 10, 5)
	select {
	case r := <-s.Replies():
		if r.BatchID != 1 || r.Err == nil {
			t.Fatalf("reply %+v, want batch 1 refused", r)
		}
	case <-ctx.Done():
		t.Fatal("a grant on a silent stream was never refused")
	}
	waitOpened(ctx, t, leader.opened) // dialled again
}

// electFrozenLeader makes "frozen-leader:1" the sequencer leader of epoch 7
// in etcd (election key <SeqElection>/1).
func electFrozenLeader(ctx context.Context, t *testing.T, cli *clientv3.Client) {
	t.Helper()
	if _, err := cli.Put(ctx, keys.SeqElection+"/1", "frozen-leader:1"); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, keys.SeqEpoch, "7"); err != nil {
		t.Fatal(err)
	}
}

func waitOpened(ctx context.Context, t *testing.T, opened <-chan struct{}) {
	t.Helper()
	select {
	case <-opened:
	case <-ctx.Done():
		t.Fatal("no grant stream opened")
	}
}

// waitStream waits until the session holds a stream (Grant is refused at
// once without one).
func waitStream(ctx context.Context, t *testing.T, s *SequencerSession) {
	t.Helper()
	for {
		s.mu.Lock()
		open := s.mu.client != nil
		s.mu.Unlock()
		if open {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatal("the session never held a stream")
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// TestStreamToADeposedLeaderIsDroppedAtOnce: once a frozen leader's
// election key is deleted (a standby evicted it), the stream to it is
// dropped and its grants refused at once, not after the silence timeout,
// and the session dials the leader etcd names now.
func TestStreamToADeposedLeaderIsDroppedAtOnce(t *testing.T) {
	cli := etcdtest.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	electFrozenLeader(ctx, t, cli)
	frozen := frozenLeader{opened: make(chan struct{}, 16)}
	next := frozenLeader{opened: make(chan struct{}, 16)}
	local := func(addr string) sequencer.GrantStreamer {
		if addr == "next-leader:1" {
			return next
		}
		return frozen
	}
	const silence = 20 * time.Second
	s := NewSequencerSession(cli, local, SessionOptions{Silence: silence}, "ingest-1", 0, func(uint64) {})
	defer s.Close()

	waitOpened(ctx, t, frozen.opened)
	waitStream(ctx, t, s)
	s.Grant(1, 10, 5)
	if _, err := cli.Put(ctx, keys.SeqElection+"/2", "next-leader:1"); err != nil {
		t.Fatal(err)
	}
	deposed := time.Now()
	if _, err := cli.Delete(ctx, keys.SeqElection+"/1"); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-s.Replies():
		if r.BatchID != 1 || r.Err == nil {
			t.Fatalf("reply %+v, want batch 1 refused", r)
		}
	case <-time.After(silence / 2):
		t.Fatal("a grant on a deposed leader's stream was not refused before the silence timeout")
	}
	waitOpened(ctx, t, next.opened)
	t.Logf("stream moved to the next leader %v after the deposed one's key was deleted", time.Since(deposed).Round(time.Millisecond))
}

// grantingLeader grants every request at once, from offset 100 on.
type grantingLeader struct{}

func (grantingLeader) Grant(ctx context.Context, _ ...grpc.CallOption) (grpc.BidiStreamingClient[pb.IngestFrame, pb.SequencerFrame], error) {
	p := localstream.New[pb.IngestFrame, pb.SequencerFrame](ctx)
	go func() {
		server := p.Server()
		next := uint64(100)
		for {
			f, err := server.Recv()
			if err != nil {
				p.ServerDone(err)
				return
			}
			out := &pb.SequencerFrame{Epoch: 8}
			for _, g := range f.Grants {
				out.Grants = append(out.Grants, &pb.GrantReply{RequestId: g.RequestId, LedgerId: g.LedgerId,
					Status: pb.GrantStatus_GRANTED, Range: &pb.Range{First: next, End: next + g.Count}})
				next += g.Count
			}
			if err := server.Send(out); err != nil {
				p.ServerDone(err)
				return
			}
		}
	}()
	return p.Client(), nil
}

// TestGrantAskedWithoutAStreamWaitsForTheNextOne: while no leader is
// elected (a takeover), a grant is neither refused nor lost: it is asked
// of the leader the session reaches next, in order with later ones.
func TestGrantAskedWithoutAStreamWaitsForTheNextOne(t *testing.T) {
	cli := etcdtest.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	local := func(string) sequencer.GrantStreamer { return grantingLeader{} }
	s := NewSequencerSession(cli, local, SessionOptions{Silence: 10 * time.Second}, "ingest-1", 0, func(uint64) {})
	defer s.Close()

	s.Grant(1, 10, 5)
	s.Grant(2, 10, 3)
	select {
	case r := <-s.Replies():
		t.Fatalf("a grant asked with no leader was answered at once: %+v", r)
	case <-time.After(300 * time.Millisecond):
	}
	electFrozenLeader(ctx, t, cli) // any leader: local answers for every address
	for i, want := range []GrantReply{{BatchID: 1, Ledger: 10, First: 100}, {BatchID: 2, Ledger: 10, First: 105}} {
		select {
		case r := <-s.Replies():
			if r != want {
				t.Fatalf("reply %d: %+v, want %+v", i, r, want)
			}
		case <-ctx.Done():
			t.Fatalf("reply %d never came", i)
		}
	}
}

// TestHeldGrantIsRefusedAfterTheHoldLimit: with no leader to ask, a grant
// is refused after grantHoldLimit, so its ledger is handed back.
func TestHeldGrantIsRefusedAfterTheHoldLimit(t *testing.T) {
	cli := etcdtest.Client(t)
	s := NewSequencerSession(cli, nil, SessionOptions{}, "ingest-1", 0, func(uint64) {})
	defer s.Close()
	asked := time.Now()
	s.Grant(1, 10, 5)
	select {
	case r := <-s.Replies():
		if r.BatchID != 1 || r.Err == nil {
			t.Fatalf("reply %+v, want batch 1 refused", r)
		}
		if waited := time.Since(asked); waited < grantHoldLimit {
			t.Fatalf("refused after %v, before the hold limit %v", waited, grantHoldLimit)
		}
	case <-time.After(3 * grantHoldLimit):
		t.Fatal("a held grant was never refused")
	}
}
