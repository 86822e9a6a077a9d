package wal

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"orderlog/internal/event"
)

// TestSlowSyncIsReported: an fdatasync at or above Config.SlowSync is told
// to Events.SlowSync with the segment it synced (a threshold of 1 ns makes
// every sync slow).
func TestSlowSyncIsReported(t *testing.T) {
	slow := make(chan event.SyncInfo, 16)
	dir := t.TempDir()
	s, err := Open(Config{Dir: dir, SlowSync: time.Nanosecond, Events: event.Listener{SlowSync: func(i event.SyncInfo) {
		select {
		case slow <- i:
		default:
		}
	}}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	mustAppend(t, s, 1, 0, 1)
	i := <-slow // Append returned after its fdatasync, which was reported first
	if i.Dir != dir || i.Segment == "" || i.Duration < i.Threshold || i.Threshold != time.Nanosecond || i.Err != nil {
		t.Fatalf("slow sync event %+v", i)
	}
}

// TestServeAnswersHealth: a store served alone answers grpc.health.v1.
func TestServeAnswersHealth(t *testing.T) {
	s, err := Open(Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := Serve(lis, s)
	defer srv.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, svc := range []string{"", "orderlog.wal.v1.WAL"} {
		resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || resp.Status != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health of %q: %v %v", svc, resp, err)
		}
	}
}
