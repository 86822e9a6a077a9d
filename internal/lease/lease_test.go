package lease

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"orderlog/internal/etcdserver"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestKeepOutlivesAnEtcdOutageShorterThanItsWindow: etcd stops for longer
// than the lease's TTL, so the client's keepalive stream ends, but comes
// back within the TTL after that: etcd restores the lease with a full TTL,
// Keep finds it alive and renews it again — no loss is reported, and the
// lease is still kept alive afterwards. A revoked lease is reported lost.
func TestKeepOutlivesAnEtcdOutageShorterThanItsWindow(t *testing.T) {
	etcd, err := etcdserver.Start(etcdserver.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer etcd.Close()
	cli, err := etcd.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const ttl = 2 * time.Second
	grant, err := cli.Grant(ctx, int64(ttl/time.Second))
	if err != nil {
		t.Fatal(err)
	}
	gaps := make(chan struct{}, 4)
	lost, err := Keep(ctx, cli, grant.ID, 3*ttl, func() { gaps <- struct{}{} })
	if err != nil {
		t.Fatal(err)
	}
	etcd.Stop()
	time.Sleep(ttl + time.Second) // the keepalive stream gives up after a TTL without an answer
	if err := etcd.Restart(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-gaps:
	case <-lost:
		t.Fatal("the lease was reported lost though etcd kept it")
	case <-ctx.Done():
		t.Fatal("no keepalive gap noticed")
	}
	// Renewed again: it outlives its TTL. etcd truncates the remaining TTL
	// toward zero, so a live lease whose renewal (due every TTL/3) comes
	// late under load reads 0; a lease that is gone reads -1.
	for range 2 {
		time.Sleep(ttl)
		resp, err := cli.TimeToLive(ctx, grant.ID)
		if err != nil {
			t.Fatal(err)
		}
		if resp.TTL < 0 {
			t.Fatalf("lease gone after the gap: TTL %d", resp.TTL)
		}
	}
	select {
	case <-lost:
		t.Fatal("lost after the gap")
	default:
	}
	if _, err := cli.Revoke(ctx, grant.ID); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lost:
	case <-ctx.Done():
		t.Fatal("a revoked lease was not reported lost")
	}
}
