package reader

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"orderlog/internal/etcdserver"
	"orderlog/internal/event"
	"orderlog/internal/keys"
	pb "orderlog/proto/sequencerpb"
)

// frozenLeader serves one batch of commit records per connection and then
// nothing at all, not even heartbeats: a leader whose process froze while
// its TCP connections stayed up.
type frozenLeader struct {
	pb.UnimplementedSequencerServer
	streams atomic.Int32
}

func (l *frozenLeader) CommitMap(req *pb.CommitMapRequest, stream grpc.ServerStreamingServer[pb.CommitMapFrame]) error {
	end := req.FromOffset + 3 + uint64(l.streams.Add(1))
	frame := &pb.CommitMapFrame{Epoch: 1, Records: []*pb.CommitRecord{
		{Epoch: 1, Kind: pb.RecordKind_HOLE, Range: &pb.Range{First: req.FromOffset, End: end}},
		{Epoch: 1, Kind: pb.RecordKind_WATERMARK, Watermark: end},
	}}
	if err := stream.Send(frame); err != nil {
		return err
	}
	<-stream.Context().Done()
	return nil
}

// TestFollowLeavesASilentLeader: a stream that carries nothing for
// FollowSilence is dropped and the leader looked up again, so C moves on
// (it stood still for good on a frozen leader's stream).
func TestFollowLeavesASilentLeader(t *testing.T) {
	srv, err := etcdserver.Start(etcdserver.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	cli, err := srv.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	leader := &frozenLeader{}
	g := grpc.NewServer()
	pb.RegisterSequencerServer(g, leader)
	go g.Serve(lis)
	defer g.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, keys.SeqElection+"/1", lis.Addr().String()); err != nil {
		t.Fatal(err)
	}

	defer func(was time.Duration) { FollowSilence = was }(FollowSilence)
	FollowSilence = 200 * time.Millisecond
	commits := NewCommitMap()
	inStep := make(chan event.ReaderInfo, 16)
	catchingUp := make(chan event.ReaderInfo, 16)
	cfg := FollowConfig{Logger: slog.New(slog.NewTextHandler(t.Output(), nil)), Events: event.Listener{
		ReaderInStep:     func(i event.ReaderInfo) { inStep <- i },
		ReaderCatchingUp: func(i event.ReaderInfo) { catchingUp <- i },
	}}
	followCtx, stopFollow := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); Follow(followCtx, cli, commits, cfg) }()
	defer func() { stopFollow(); <-done }()
	// Each stream brings the reader in step with one batch, then goes
	// silent and is dropped: the events tell each step.
	if start := <-catchingUp; start.Err != nil || start.Epoch != 0 {
		t.Fatalf("first event %+v, want catching up from the start", start)
	}
	for stream, want := range []uint64{4, 4 + 5, 4 + 5 + 6} {
		select {
		case i := <-inStep:
			if i.Committed != want || i.Epoch != 1 || i.Leader != lis.Addr().String() {
				t.Fatalf("stream %d: in step %+v, want C=%d of epoch 1 from %s", stream+1, i, want, lis.Addr())
			}
		case <-ctx.Done():
			_, c := commits.Committed()
			t.Fatalf("C = %d after %d streams: the reader stayed on a silent stream", c, leader.streams.Load())
		}
		if stream < 2 {
			if lost := <-catchingUp; !errors.Is(lost.Err, errSilentLeader) || lost.Committed != want {
				t.Fatalf("stream %d ended with %+v, want errSilentLeader at C=%d", stream+1, lost, want)
			}
		}
	}
}
