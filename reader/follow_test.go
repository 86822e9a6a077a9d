package reader

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"orderlog/internal/etcdserver"
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
	followCtx, stopFollow := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); Follow(followCtx, cli, commits, t.Logf) }()
	defer func() { stopFollow(); <-done }()
	const third = 4 + 5 + 6 // C after the third stream's batch: three streams of 4, 5 and 6 offsets
	for {
		if _, c := commits.Committed(); c >= third {
			break // C moved past two silent streams
		}
		select {
		case <-ctx.Done():
			_, c := commits.Committed()
			t.Fatalf("C = %d after %d streams: the reader stayed on a silent stream", c, leader.streams.Load())
		case <-time.After(10 * time.Millisecond):
		}
	}
}
