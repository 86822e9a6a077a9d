package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"orderlog/client"
	"orderlog/internal/apierr"
	"orderlog/proto/orderlogpb"
)

// probe is one look at a restarting `orderlog dev`: /readyz, the gRPC
// health service, a read from offset 0, then /readyz again.
type probe struct {
	readyz     int    // HTTP status of GET /readyz before the read; 0: not listening
	health     string // overall grpc.health.v1 status before the read ("" when unanswered)
	readErr    error  // the read from offset 0
	readyzNext int    // GET /readyz after the read
	bodyNext   string // its body
	readerNext string // the orderlog.v1.Reader service's health after it
}

// TestReadyzFollowsReadsAcrossARestart: after `orderlog dev` with data is
// SIGKILLed and started again, /readyz and grpc.health.v1 say not ready
// while a read from offset 0 answers UNAVAILABLE, and ready exactly once it
// works. Each probe looks before and after the read, so both orders of
// events are checked without timing: ready before a read means the read
// works; a read that works means the reader's readiness, looked at next,
// is ready.
func TestReadyzFollowsReadsAcrossARestart(t *testing.T) {
	srv, c := startDev(t)
	defer srv.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	produceOne(ctx, t, c)
	srv.kill()
	srv.start() // the old leader's session outlives the kill by its TTL: reads wait for it

	conn, err := grpc.NewClient(srv.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, MaxDelay: 200 * time.Millisecond}}))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	health := healthpb.NewHealthClient(conn)
	var down, unavailable int // probes while nothing listened, and with /readyz 503 and a read refused
	var sawNotServing bool
	for probes := 0; ; probes++ {
		if ctx.Err() != nil {
			t.Fatalf("not ready after %d probes; log in %s", probes, srv.log.Name())
		}
		p := look(ctx, srv, c, health)
		checkProbe(t, p)
		sawNotServing = sawNotServing || p.health == "NOT_SERVING"
		switch {
		case p.readyz == 0:
			down++
			time.Sleep(5 * time.Millisecond) // pacing while the process starts, not an assertion
		case p.readyz == http.StatusServiceUnavailable && p.readErr != nil:
			unavailable++
		}
		if p.readErr == nil && p.readyzNext == http.StatusOK {
			t.Logf("ready after %d probes: %d while starting, %d with /readyz 503 and reads UNAVAILABLE", probes, down, unavailable)
			break
		}
	}
	if unavailable == 0 || !sawNotServing {
		t.Fatalf("never saw /readyz 503 with reads UNAVAILABLE (%d) or NOT_SERVING (%v) after the restart", unavailable, sawNotServing)
	}
}

// checkProbe asserts what one probe must show.
func checkProbe(t *testing.T, p probe) {
	t.Helper()
	if p.readErr != nil && apierr.FromGRPC(p.readErr).Code != apierr.Unavailable {
		t.Fatalf("read from 0 failed with %v, want only UNAVAILABLE while starting", p.readErr)
	}
	if p.readyz == http.StatusOK && p.readErr != nil {
		t.Fatalf("/readyz said 200, then a read failed: %v", p.readErr)
	}
	if p.health == "SERVING" && p.readErr != nil {
		t.Fatalf("health said SERVING, then a read failed: %v", p.readErr)
	}
	if p.readyz == http.StatusOK && p.health != "SERVING" {
		t.Fatalf("/readyz said 200, then the health service %q", p.health)
	}
	if p.readErr == nil {
		// Reads work: the reader is ready, and /readyz names no reader
		// reason (it may still wait for another role of the process).
		if p.readerNext != "SERVING" || p.readyzNext != http.StatusOK && strings.Contains(p.bodyNext, "reader:") {
			t.Fatalf("a read worked, then reader health %q and /readyz %d %q", p.readerNext, p.readyzNext, p.bodyNext)
		}
	}
	if p.readyzNext == http.StatusServiceUnavailable && !strings.HasPrefix(p.bodyNext, "not ready\n") {
		t.Fatalf("503 body %q does not say why", p.bodyNext)
	}
}

func look(ctx context.Context, srv *serverProcess, c *client.Client, health healthpb.HealthClient) probe {
	var p probe
	p.readyz, _ = getReadyz(ctx, srv.httpAddr)
	p.health = healthStatus(ctx, health, "")
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	p.readErr = c.Read(rctx, 0, 1, func(page *client.Page) error {
		if len(page.Messages) == 0 || page.Messages[0].Offset != 0 {
			return fmt.Errorf("read from 0 gave %v", page)
		}
		return nil
	})
	cancel()
	p.readyzNext, p.bodyNext = getReadyz(ctx, srv.httpAddr)
	p.readerNext = healthStatus(ctx, health, "orderlog.v1.Reader")
	return p
}

// getReadyz returns GET /readyz's status and body; 0 when nothing answers.
func getReadyz(ctx context.Context, addr string) (int, string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/readyz", nil)
	if err != nil {
		return 0, ""
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, ""
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// healthStatus asks grpc.health.v1.Health/Check; "" when nothing answers.
func healthStatus(ctx context.Context, health healthpb.HealthClient, service string) string {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	// WaitForReady: the process restarted, and the connection may still
	// be backing off from the old one when the new one serves (reads, on
	// another connection, can work by then).
	resp, err := health.Check(ctx, &healthpb.HealthCheckRequest{Service: service}, grpc.WaitForReady(true))
	if err != nil {
		return ""
	}
	return resp.Status.String()
}

func produceOne(ctx context.Context, t *testing.T, c *client.Client) {
	t.Helper()
	raw, err := c.RawProducer().Produce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.CloseSend()
	if err := raw.Send(&orderlogpb.ProduceRequest{RequestId: 1, Messages: []*orderlogpb.Message{{Topic: "t", Value: []byte("first")}}}); err != nil {
		t.Fatal(err)
	}
	if resp, err := raw.Recv(); err != nil || resp.ErrorCode != "" {
		t.Fatalf("produce: %v %v", resp, err)
	}
	if err := c.WaitCommitted(ctx, 0); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
}
