package grpcopt

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

func serveHealth(t *testing.T, addr string) *grpc.Server {
	t.Helper()
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(ServerOptions()...)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go srv.Serve(lis)
	return srv
}

// TestConnectionComesBackSoonAfterTheServer: a connection whose server was
// gone for 12 s while calls kept failing on it (gRPC's default backoff
// would next try some 16 s after it went) reaches the server within 2 s of
// its return, on the same address. Ledger recoveries and takeovers on other
// nodes waited for such reconnections.
func TestConnectionComesBackSoonAfterTheServer(t *testing.T) {
	if testing.Short() {
		t.Skip("waits 12 s")
	}
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := free.Addr().String()
	free.Close()
	srv := serveHealth(t, addr)
	conn, err := grpc.NewClient(addr, DialOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true)); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	// Calls keep failing meanwhile, as a recovery's or a takeover's do:
	// each failed attempt lengthens the connection's backoff.
	for down := time.Now(); time.Since(down) < 12*time.Second; time.Sleep(100 * time.Millisecond) {
		cctx, ccancel := context.WithTimeout(ctx, 100*time.Millisecond)
		_, _ = client.Check(cctx, &healthpb.HealthCheckRequest{})
		ccancel()
	}
	srv = serveHealth(t, addr)
	defer srv.Stop()
	back := time.Now()
	if _, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true)); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(back); took > 2*time.Second {
		t.Fatalf("reconnected %v after the server was back, want within 2 s", took)
	}
}
