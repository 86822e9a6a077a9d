package node

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"

	"orderlog/ingest"
	"orderlog/internal/etcdserver"
)

// TestEveryRoleServesHealthAndReflection: a reader started before any
// sequencer is not ready (/readyz 503 naming the reader, grpc.health.v1
// NOT_SERVING), turns SERVING once a sequencer and an ingest node run, and
// every role's ports answer /healthz, /readyz, /metrics, the health
// service and server reflection with the services that role serves.
func TestEveryRoleServesHealthAndReflection(t *testing.T) {
	etcd, err := etcdserver.Start(etcdserver.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer etcd.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	single := Replication{W: 1, A: 1}
	rd := startNodeOn(t, etcd, Roles{Reader: true}, ingest.Config{}, single)
	defer rd.Close()
	code, body := httpGet(t, rd, "/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "reader: waiting for the first watermark") {
		t.Fatalf("reader with no sequencer: /readyz %d %q", code, body)
	}
	health := healthpb.NewHealthClient(grpcConn(t, rd))
	watch, err := health.Watch(ctx, &healthpb.HealthCheckRequest{Service: "orderlog.v1.Reader"})
	if err != nil {
		t.Fatal(err)
	}
	if first, err := watch.Recv(); err != nil || first.Status != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("reader's health before any sequencer: %v %v", first, err)
	}

	in := startNodeOn(t, etcd, Roles{Ingest: true}, ingest.Config{}, single)
	defer in.Close()
	seq := startNodeOn(t, etcd, Roles{Sequencer: true}, ingest.Config{}, single)
	defer seq.Close()
	if next, err := watch.Recv(); err != nil || next.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("reader's health once a sequencer leads: %v %v", next, err)
	}
	waitAllReady(t, ctx, rd, in, seq)

	common := []string{"grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection", "grpc.reflection.v1alpha.ServerReflection", "orderlog.v1.Admin", "orderlog.v1.Schemas"}
	for _, tc := range []struct {
		name     string
		server   *Server
		services []string
		// unhealthed are listed by reflection without a health status of
		// their own (Arrow Flight, consumer groups and credentials,
		// wherever a reader runs).
		unhealthed []string
	}{
		{"reader", rd, []string{"orderlog.v1.Reader"}, []string{flightService, "orderlog.v1.Auth", "orderlog.v1.Consumer"}},
		{"ingest", in, []string{"orderlog.ingest.v1.IngestPeer", "orderlog.v1.Producer", "orderlog.v1.Reader", "orderlog.wal.v1.WAL"},
			[]string{flightService, "orderlog.v1.Auth", "orderlog.v1.Consumer"}},
		{"sequencer", seq, []string{"orderlog.sequencer.v1.Sequencer"}, nil},
	} {
		if code, body := httpGet(t, tc.server, "/readyz"); code != http.StatusOK {
			t.Errorf("%s: /readyz %d %q", tc.name, code, body)
		}
		if code, _ := httpGet(t, tc.server, "/healthz"); code != http.StatusOK {
			t.Errorf("%s: /healthz %d", tc.name, code)
		}
		if code, body := httpGet(t, tc.server, "/metrics"); code != http.StatusOK || !strings.Contains(body, `orderlog_role_ready{role="`+tc.name+`"} 1`) {
			t.Errorf("%s: /metrics %d without its role ready", tc.name, code)
		}
		conn := grpcConn(t, tc.server)
		for _, svc := range append([]string{""}, tc.services...) {
			resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
			if err != nil || resp.Status != healthpb.HealthCheckResponse_SERVING {
				t.Errorf("%s: health of %q: %v %v", tc.name, svc, resp, err)
			}
		}
		want := append(append(slices.Clone(common), tc.services...), tc.unhealthed...)
		slices.Sort(want)
		if got := listServices(ctx, t, conn); !slices.Equal(got, want) {
			t.Errorf("%s: reflection lists %v, want %v", tc.name, got, want)
		}
	}
}

// listServices asks server reflection for the services, as grpcurl list
// does.
func listServices(ctx context.Context, t *testing.T, conn *grpc.ClientConn) []string {
	t.Helper()
	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer stream.CloseSend()
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{ListServices: "*"}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.Name)
	}
	slices.Sort(names)
	return names
}

func grpcConn(t *testing.T, s *Server) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(s.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func httpGet(t *testing.T, s *Server, path string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + s.HTTPAddr() + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

const flightService = "arrow.flight.protocol.FlightService"
