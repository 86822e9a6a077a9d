package node

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// servePeer starts a gRPC server with only the health service, as a
// node's answers its peers; its status is NOT_SERVING, which still counts
// as reached.
func servePeer(t *testing.T) (string, *grpc.Server) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	h := health.NewServer()
	h.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(srv, h)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return lis.Addr().String(), srv
}

func TestPeerWatchReachesAMajorityOnlyWithAPeerThatAnswers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var p peerWatch
	defer p.closeAll()
	if p.askAll(ctx) {
		t.Fatal("a node with no known peer reached a majority")
	}

	a, srvA := servePeer(t)
	b, srvB := servePeer(t)
	p.setPeers([]string{a, b})
	if !p.askAll(ctx) {
		t.Fatal("both peers answer: no majority")
	}
	srvA.Stop()
	if !p.askAll(ctx) {
		t.Fatal("one of two peers answers (2 of 3 nodes): no majority")
	}
	srvB.Stop()
	if p.askAll(ctx) {
		t.Fatal("no peer answers: a majority all the same")
	}

	// A peer that is no longer listed is no longer asked.
	c, _ := servePeer(t)
	p.setPeers([]string{c})
	if !p.askAll(ctx) {
		t.Fatal("the one listed peer answers (2 of 2 nodes): no majority")
	}
}

func TestPeerWatchForgetsAMajorityAfterQuorumLostAfter(t *testing.T) {
	var p peerWatch
	t0 := time.Unix(1000, 0)
	if p.reachesMajority(t0) {
		t.Fatal("a majority before any was reached")
	}
	p.lastMajority.Store(t0.UnixNano())
	if !p.reachesMajority(t0.Add(quorumLostAfter - time.Millisecond)) {
		t.Fatal("majority forgotten before quorumLostAfter")
	}
	if p.reachesMajority(t0.Add(quorumLostAfter)) {
		t.Fatal("majority kept after quorumLostAfter")
	}
}
