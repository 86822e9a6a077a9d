package campaign

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"orderlog/internal/etcdtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestOneLeadsAndTheOtherTakesOverWhenItStops: of two campaigners one
// leads at a time, with an election key that exists while it leads; when
// its Run ends, the other leads.
func TestOneLeadsAndTheOtherTakesOverWhenItStops(t *testing.T) {
	cli := etcdtest.Client(t)
	leading := make(chan string, 4)
	run := func(ctx context.Context, name string) chan struct{} {
		done := make(chan struct{})
		go func() {
			defer close(done)
			Run(ctx, Config{Etcd: cli, Prefix: "test/election", Name: name, SessionTTL: 2, What: "test"},
				func(ctx context.Context, key string) {
					if resp, err := cli.Get(ctx, key); err != nil || len(resp.Kvs) == 0 {
						t.Errorf("%s leads without its key %q: %v", name, key, err)
					}
					leading <- name
					<-ctx.Done()
				})
		}()
		return done
	}
	ctxA, stopA := context.WithCancel(context.Background())
	doneA := run(ctxA, "a")
	first := <-leading
	ctxB, stopB := context.WithCancel(context.Background())
	doneB := run(ctxB, "b")
	select {
	case second := <-leading:
		t.Fatalf("%s leads while %s does", second, first)
	case <-time.After(300 * time.Millisecond):
	}
	stopA()
	<-doneA
	select {
	case second := <-leading:
		if second != "b" {
			t.Fatalf("%s leads after a stopped", second)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("b never led")
	}
	stopB()
	<-doneB
}

// TestARestartedProcessDoesNotWaitForItsOwnEarlierKey: a key this name
// left under another lease (the process before a kill) is revoked, and
// the restarted process leads at once instead of after the lease's TTL.
func TestARestartedProcessDoesNotWaitForItsOwnEarlierKey(t *testing.T) {
	cli := etcdtest.Client(t)
	ctx := context.Background()
	lease, err := cli.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, "test/election/stale", "a", clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	ctxA, stop := context.WithCancel(ctx)
	led := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		Run(ctxA, Config{Etcd: cli, Prefix: "test/election", Name: "a", SessionTTL: 2}, func(ctx context.Context, _ string) {
			close(led)
			<-ctx.Done()
		})
	}()
	select {
	case <-led:
	case <-time.After(5 * time.Second):
		t.Fatal("waited for its earlier key's 60 s lease")
	}
	stop()
	<-done
}
