package client

import (
	"context"
	"net"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"

	"orderlog/internal/grpcopt"
	"orderlog/proto/orderlogpb"
)

func TestParseEndpoints(t *testing.T) {
	cases := map[string]struct {
		in   string
		want []string
	}{
		"one":              {"h1:7070", []string{"h1:7070"}},
		"three":            {"h1:7070,h2:7070,h3:7070", []string{"h1:7070", "h2:7070", "h3:7070"}},
		"spaces_and_empty": {" h1:7070 , ,h2:7070,", []string{"h1:7070", "h2:7070"}},
		"repeat":           {"h1:7070,h1:7070", []string{"h1:7070"}},
		"ipv6":             {"[::1]:7070", []string{"[::1]:7070"}},
		"empty":            {"", nil},
		"only_commas":      {",,", nil},
		"no_port":          {"h1:7070,h2", nil},
		"empty_port":       {"h1:", nil},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := ParseEndpoints(tc.in)
			if tc.want == nil {
				if err == nil {
					t.Fatalf("ParseEndpoints(%q) = %v, want an error", tc.in, got)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("ParseEndpoints(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
			}
		})
	}
}

// TestEndpointSetLearnsAndMoves: seeds stay first in the order given,
// learned endpoints follow sorted, a failed endpoint is passed over, and
// producers start at the endpoints in turn.
func TestEndpointSetLearnsAndMoves(t *testing.T) {
	s := newEndpointSet([]string{"b:1", "a:1"}, grpcopt.DialOptions())
	s.learn(nil) // a node that knows nothing changes nothing
	s.learn([]string{"d:1", "a:1", "c:1", "c:1"})
	if got, want := s.list(), []string{"b:1", "a:1", "c:1", "d:1"}; !slices.Equal(got, want) {
		t.Fatalf("endpoints %v, want %v", got, want)
	}
	s.failed("b:1")
	if got := s.current(); got != "a:1" {
		t.Fatalf("current after b:1 failed = %s, want a:1", got)
	}
	s.failed("c:1")
	if got := s.after("a:1"); got != "d:1" {
		t.Fatalf("after a:1 = %s, want d:1 (c:1 failed just now)", got)
	}
	var starts []string
	for range 4 {
		starts = append(starts, s.nextProducer())
	}
	// b:1 and c:1 failed just now: their turns go to the next live ones.
	if want := []string{"a:1", "a:1", "d:1", "d:1"}; !slices.Equal(starts, want) {
		t.Fatalf("producers start at %v, want %v", starts, want)
	}
	s.learn([]string{"e:1"}) // the current endpoint a:1 is a seed: kept
	if got := s.current(); got != "a:1" {
		t.Fatalf("current = %s, want a:1", got)
	}
}

// fakeAdmin answers Status with a fixed endpoint list.
type fakeAdmin struct {
	orderlogpb.UnimplementedAdminServer
	endpoints []string
	committed uint64
}

func (f *fakeAdmin) Status(context.Context, *orderlogpb.StatusRequest) (*orderlogpb.StatusResponse, error) {
	return &orderlogpb.StatusResponse{Endpoints: f.endpoints, Committed: f.committed, Epoch: 1}, nil
}

// startFakeAdmin serves a fakeAdmin on a loopback port.
func startFakeAdmin(t *testing.T, admin *fakeAdmin) (addr string, stop func()) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	orderlogpb.RegisterAdminServer(srv, admin)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return lis.Addr().String(), srv.Stop
}

// TestDialLearnsEndpointsFromStatus: a client dialled with one address
// learns the cluster's others from Status, and when that node stops its
// calls go to a learned one.
func TestDialLearnsEndpointsFromStatus(t *testing.T) {
	first, second := &fakeAdmin{committed: 1}, &fakeAdmin{committed: 2}
	firstAddr, stopFirst := startFakeAdmin(t, first)
	secondAddr, _ := startFakeAdmin(t, second)
	first.endpoints = []string{secondAddr, firstAddr}
	second.endpoints = first.endpoints

	c, err := Dial(firstAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if got := c.Endpoints(); len(got) != 2 || got[0] != firstAddr || got[1] != secondAddr {
		t.Fatalf("endpoints %v, want [%s %s]", got, firstAddr, secondAddr)
	}
	stopFirst()
	st, err := c.Status(ctx)
	if err != nil || st.Committed != 2 {
		t.Fatalf("Status after the first node stopped = %v, %v; want the second node's", st, err)
	}
}

// TestDialListMovesPastADeadEndpoint: the first address of the list
// refuses connections; calls go on to the next.
func TestDialListMovesPastADeadEndpoint(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := lis.Addr().String()
	lis.Close() // nothing listens there now: connection refused
	liveAddr, _ := startFakeAdmin(t, &fakeAdmin{committed: 7})

	c, err := Dial(dead + "," + liveAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := c.Status(ctx)
	if err != nil || st.Committed != 7 {
		t.Fatalf("Status = %v, %v; want the live node's", st, err)
	}
}
