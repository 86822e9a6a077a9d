package sequencer

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "orderlog/proto/sequencerpb"
)

// TestIdleCommitMapStreamCarriesHeartbeats: with nothing to send, the
// leader's commit-map stream still carries a frame every heartbeat, so a
// reader can tell an idle leader from a frozen one.
func TestIdleCommitMapStreamCarriesHeartbeats(t *testing.T) {
	c := newTestCluster(t)
	// A long session timeout: the point is the leader's heartbeats, and on a
	// loaded machine (the race run) the client's own idle heartbeats can
	// come later than the default 1 s, which ends the session.
	leader := c.waitServing(c.startNodeWith(MachineConfig{SessionTimeout: 30 * time.Second}))
	conn, err := grpc.NewClient(leader.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := pb.NewSequencerClient(conn).CommitMap(ctx, &pb.CommitMapRequest{FromOffset: 0})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil { // the snapshot: its watermark
		t.Fatal(err)
	}
	for beats := 0; beats < 2; {
		start := time.Now()
		f, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if len(f.Records) > 0 {
			continue
		}
		if waited := time.Since(start); waited > 5*CommitMapHeartbeat {
			t.Fatalf("heartbeat after %s, want about %s", waited, CommitMapHeartbeat)
		}
		beats++
	}
}

// TestIdleGrantStreamCarriesHeartbeats: an ingest node's grant stream on
// which it asks for nothing still carries empty frames from the leader, so
// the ingest node can tell an idle leader from a frozen one.
func TestIdleGrantStreamCarriesHeartbeats(t *testing.T) {
	c := newTestCluster(t)
	// A long session timeout: the point is the leader's heartbeats, and on a
	// loaded machine (the race run) the client's own idle heartbeats can
	// come later than the default 1 s, which ends the session.
	leader := c.waitServing(c.startNodeWith(MachineConfig{SessionTimeout: 30 * time.Second}))
	conn, err := grpc.NewClient(leader.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client, err := DialGrant(ctx, pb.NewSequencerClient(conn), "ingest-idle", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	for beats := 0; beats < 3; {
		select {
		case f, ok := <-client.Frames():
			if !ok {
				t.Fatalf("grant stream ended: %v", client.Err())
			}
			if len(f.Grants)+len(f.Close) == 0 && f.Epoch != 0 {
				beats++
			}
		case <-ctx.Done():
			t.Fatalf("%d heartbeats in 30 s, want 3 (one every %s)", beats, GrantStreamHeartbeat)
		}
	}
}
