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
// node answers its peers: its quorumLostService status says whether it
// doubts the etcd quorum (SERVING: yes) or not.
func servePeer(t *testing.T, doubts bool) (string, *grpc.Server) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	h := health.NewServer()
	status := healthpb.HealthCheckResponse_NOT_SERVING
	if doubts {
		status = healthpb.HealthCheckResponse_SERVING
	}
	h.SetServingStatus(quorumLostService, status)
	healthpb.RegisterHealthServer(srv, h)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return lis.Addr().String(), srv
}

func TestPeerWatchFindsAMajorityOnlyOfNodesThatLostTheQuorumAlike(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var p peerWatch
	defer p.closeAll()
	if p.askAll(ctx) {
		t.Fatal("a node with no known peer found a majority")
	}

	// etcd elects: both peers doubt the quorum too.
	a, srvA := servePeer(t, true)
	b, srvB := servePeer(t, true)
	p.setPeers([]string{a, b})
	if !p.askAll(ctx) {
		t.Fatal("both peers doubt the quorum: no majority")
	}
	srvA.Stop()
	if !p.askAll(ctx) {
		t.Fatal("one of two peers doubts the quorum (2 of 3 nodes): no majority")
	}
	srvB.Stop()
	if p.askAll(ctx) {
		t.Fatal("no peer answers: a majority all the same")
	}

	// This node alone lost etcd: its peers answer, with the quorum.
	c, _ := servePeer(t, false)
	d, _ := servePeer(t, false)
	p.setPeers([]string{c, d})
	if p.askAll(ctx) {
		t.Fatal("peers that have the quorum counted as waiting alike")
	}
	// A peer no longer listed is no longer asked; one listed that does
	// not answer still counts among the nodes.
	e, _ := servePeer(t, true)
	p.setPeers([]string{e, "127.0.0.1:1"})
	if !p.askAll(ctx) {
		t.Fatal("one of two listed peers doubts the quorum (2 of 3 nodes): no majority")
	}
	p.setPeers([]string{e, "127.0.0.1:1", c})
	if p.askAll(ctx) {
		t.Fatal("2 of 4 nodes counted as a majority")
	}

	// A stopping node's health server answers NOT_SERVING for every
	// service (Server.Close shuts it down first): not "lost it too".
	h := health.NewServer()
	h.SetServingStatus(quorumLostService, healthpb.HealthCheckResponse_SERVING)
	h.Shutdown()
	if st, err := h.Check(ctx, &healthpb.HealthCheckRequest{Service: quorumLostService}); err != nil || st.Status == healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("a shut-down health server says its node lost the quorum: %v, %v", st, err)
	}
}

func TestPeerWatchForgetsAMajorityAfterPeersMajorityFor(t *testing.T) {
	var p peerWatch
	t0 := time.Unix(1000, 0)
	if p.reachesMajority(t0) || p.askedSince(t0) {
		t.Fatal("a majority, or a round, before any was")
	}
	p.lastAsked.Store(t0.UnixNano())
	if !p.askedSince(t0) || p.askedSince(t0.Add(time.Nanosecond)) {
		t.Fatal("askedSince is wrong at the boundary")
	}
	p.lastMajority.Store(t0.UnixNano())
	if !p.reachesMajority(t0.Add(peersMajorityFor - time.Millisecond)) {
		t.Fatal("majority forgotten before peersMajorityFor")
	}
	if p.reachesMajority(t0.Add(peersMajorityFor)) {
		t.Fatal("majority kept after peersMajorityFor")
	}
}
