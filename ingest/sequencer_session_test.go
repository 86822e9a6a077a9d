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
