package sequencer

import (
	"context"
	"errors"
	"testing"
	"time"

	"orderlog/internal/etcdtest"
	"orderlog/internal/keys"
)

// TestExtendAdoptsItsOwnLostExtension: an extension etcd applied but whose
// answer was lost leaves seq/reserved above what the retry expects. The
// retry must learn the value (it is this epoch's, and durable), not fail on
// every tick forever while grants wait.
func TestExtendAdoptsItsOwnLostExtension(t *testing.T) {
	cli := etcdtest.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := &epochStore{cli: cli, epoch: 7}
	if _, err := cli.Put(ctx, keys.SeqEpoch, "7"); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, keys.SeqReserved, "100"); err != nil {
		t.Fatal(err)
	}
	if err := s.extend(ctx, 100, 200); err != nil { // applied; suppose its answer was lost
		t.Fatal(err)
	}
	var ahead *reservedAheadError
	if err := s.extend(ctx, 100, 150); !errors.As(err, &ahead) || ahead.current != 200 {
		t.Fatalf("retry of a lost extension: %v, want seq/reserved already 200", err)
	}
	if _, err := cli.Put(ctx, keys.SeqEpoch, "8"); err != nil {
		t.Fatal(err)
	}
	if err := s.extend(ctx, 200, 300); !errors.Is(err, ErrDeposed) {
		t.Fatalf("extend after a newer epoch: %v, want ErrDeposed", err)
	}
}
