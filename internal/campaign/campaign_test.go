package campaign

import (
	"context"
	"testing"
	"time"

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
