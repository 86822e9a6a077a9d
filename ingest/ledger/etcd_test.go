package ledger

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"orderlog/internal/etcdtest"
	"orderlog/internal/keys"
)

// startEtcd runs a real embedded etcd server for one test.
func startEtcd(t testing.TB) *clientv3.Client { return etcdtest.Client(t) }

// setEpochAndWriter writes the sequencer epoch and a lease-bound ingest key,
// as the sequencer and ingest do; it returns the writer's lease.
func setEpochAndWriter(t testing.TB, cli *clientv3.Client, epoch int64, writer string) clientv3.LeaseID {
	t.Helper()
	ctx := context.Background()
	if _, err := cli.Put(ctx, keys.SeqEpoch, strconv.FormatInt(epoch, 10)); err != nil {
		t.Fatal(err)
	}
	lease, err := cli.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, keys.Ingest(writer), "alive", clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	return lease.ID
}

func newOpenRecord(epoch int64, writer string) Metadata {
	return Metadata{WriterIncarnation: writer, Epoch: epoch, W: 3, A: 2, State: StateOpen, LastEntry: -1,
		Ensemble: []Member{{StoreID: "s1", Incarnation: 1, Address: "a"}, {StoreID: "s2", Incarnation: 2, Address: "b"}, {StoreID: "s3", Incarnation: 3, Address: "c"}}}
}

func TestCreateComparesEpochAndWriter(t *testing.T) {
	cli := startEtcd(t)
	ctx := context.Background()
	lease := setEpochAndWriter(t, cli, 5, "ing-1")

	m, err := createRecord(ctx, cli, newOpenRecord(5, "ing-1"), keys.Ingest("ing-1"))
	if err != nil {
		t.Fatal(err)
	}
	if m.ID != 1 {
		t.Fatalf("first id %d, want 1", m.ID)
	}
	if _, err := createRecord(ctx, cli, newOpenRecord(4, "ing-1"), keys.Ingest("ing-1")); !errors.Is(err, ErrStaleEpoch) {
		t.Fatalf("old epoch: %v, want ErrStaleEpoch", err)
	}
	if _, err := cli.Revoke(ctx, lease); err != nil {
		t.Fatal(err)
	}
	if _, err := createRecord(ctx, cli, newOpenRecord(5, "ing-1"), keys.Ingest("ing-1")); !errors.Is(err, ErrWriterGone) {
		t.Fatalf("revoked writer: %v, want ErrWriterGone", err)
	}
	got, err := Get(ctx, cli, 1)
	if err != nil || got.State != StateOpen || got.Epoch != 5 {
		t.Fatalf("Get = %+v, %v", got, err)
	}
	if _, err := Get(ctx, cli, 2); !errors.Is(err, ErrNotFound) {
		t.Fatalf("no ledger 2 should exist: %v", err)
	}
}

func TestCreateConcurrentIDsUnique(t *testing.T) {
	cli := startEtcd(t)
	setEpochAndWriter(t, cli, 1, "w")
	var mu sync.Mutex
	ids := map[uint64]bool{}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 4 {
				m, err := createRecord(context.Background(), cli, newOpenRecord(1, "w"), keys.Ingest("w"))
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if ids[m.ID] {
					t.Errorf("id %d allocated twice", m.ID)
				}
				ids[m.ID] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(ids) != 32 {
		t.Fatalf("%d ids, want 32", len(ids))
	}
}

func TestStateTransitionsAreCAS(t *testing.T) {
	cli := startEtcd(t)
	ctx := context.Background()
	setEpochAndWriter(t, cli, 1, "w")
	m, err := createRecord(ctx, cli, newOpenRecord(1, "w"), keys.Ingest("w"))
	if err != nil {
		t.Fatal(err)
	}
	stale := m
	rec, swapped, err := transition(ctx, cli, m, StateOpen, func(m Metadata) Metadata { m.State = StateRecovering; return m })
	if err != nil || !swapped || rec.State != StateRecovering {
		t.Fatalf("open → recovering: %+v %v %v", rec, swapped, err)
	}
	// The writer's close, decided on its stale view, loses.
	got, swapped, err := transition(ctx, cli, stale, StateOpen, func(m Metadata) Metadata {
		m.State, m.LastEntry = StateClosed, 3
		return m
	})
	if err != nil || swapped || got.State != StateRecovering {
		t.Fatalf("stale open → closed: %+v %v %v", got, swapped, err)
	}
	// Two recoverers race recovering → closed: the first wins, the second sees its result.
	closeAt := func(last int64) func(Metadata) Metadata {
		return func(m Metadata) Metadata { m.State, m.LastEntry = StateClosed, last; return m }
	}
	first, swapped1, err1 := transition(ctx, cli, rec, StateRecovering, closeAt(9))
	second, swapped2, err2 := transition(ctx, cli, rec, StateRecovering, closeAt(4))
	if err1 != nil || err2 != nil || !swapped1 || swapped2 {
		t.Fatalf("race: %v %v %v %v", swapped1, swapped2, err1, err2)
	}
	if first.LastEntry != 9 || second.LastEntry != 9 || second.State != StateClosed {
		t.Fatalf("loser saw %+v, winner wrote %+v", second, first)
	}
}

func TestListFilters(t *testing.T) {
	cli := startEtcd(t)
	ctx := context.Background()
	setEpochAndWriter(t, cli, 1, "a")
	setEpochAndWriter(t, cli, 1, "b")
	for _, w := range []string{"a", "b", "a"} {
		if _, err := createRecord(ctx, cli, newOpenRecord(1, w), keys.Ingest(w)); err != nil {
			t.Fatal(err)
		}
	}
	setEpochAndWriter(t, cli, 2, "a")
	m, err := createRecord(ctx, cli, newOpenRecord(2, "a"), keys.Ingest("a"))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := transition(ctx, cli, m, StateOpen, func(m Metadata) Metadata { m.State, m.LastEntry = StateClosed, -1; return m }); err != nil {
		t.Fatal(err)
	}
	check := func(f Filter, want ...uint64) {
		t.Helper()
		got, err := List(ctx, cli, f)
		if err != nil {
			t.Fatal(err)
		}
		var ids []uint64
		for _, m := range got {
			ids = append(ids, m.ID)
		}
		if len(ids) != len(want) {
			t.Fatalf("List(%+v) = %v, want %v", f, ids, want)
		}
		for i := range ids {
			if ids[i] != want[i] {
				t.Fatalf("List(%+v) = %v, want %v", f, ids, want)
			}
		}
	}
	check(Filter{}, 1, 2, 3, 4)
	check(Filter{States: []State{StateOpen, StateRecovering}, EpochBelow: 2}, 1, 2, 3)
	check(Filter{Writer: "a"}, 1, 3, 4)
	check(Filter{States: []State{StateClosed}}, 4)
}

func TestWaitClosedSeesLaterClose(t *testing.T) {
	cli := startEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	setEpochAndWriter(t, cli, 1, "w")
	m, err := createRecord(ctx, cli, newOpenRecord(1, "w"), keys.Ingest("w"))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan Metadata, 1)
	go func() {
		got, err := waitClosed(ctx, cli, m.ID)
		if err != nil {
			t.Error(err)
		}
		done <- got
	}()
	if _, _, err := transition(ctx, cli, m, StateOpen, func(m Metadata) Metadata { m.State, m.LastEntry = StateClosed, 6; return m }); err != nil {
		t.Fatal(err)
	}
	if got := <-done; got.LastEntry != 6 || got.State != StateClosed {
		t.Fatalf("waitClosed = %+v", got)
	}
}
