package rereplicate

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"google.golang.org/grpc"

	"orderlog/ingest/ledger"
	"orderlog/ingest/wal"
	"orderlog/internal/etcdtest"
	"orderlog/internal/keys"
)

// TestMain fails the package's tests when a goroutine outlives them.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testStore is a real WAL store served over gRPC on a loopback port 0 and
// registered in etcd as a node registers its store.
type testStore struct {
	dir    string
	addr   string // kept across restarts, as a node's address is
	store  *wal.Store
	server *grpc.Server
	member ledger.Member
}

type testCluster struct {
	cli    *clientv3.Client
	dialer *ledger.GRPCDialer
	stores []*testStore
	clock  atomic.Int64 // unix nanoseconds of the fake clock
}

const testEpoch = 4

func newTestCluster(t *testing.T, n int) *testCluster {
	t.Helper()
	c := &testCluster{cli: etcdtest.Client(t), dialer: ledger.NewGRPCDialer()}
	t.Cleanup(func() { c.dialer.Close() })
	c.clock.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	ctx := context.Background()
	if _, err := c.cli.Put(ctx, keys.SeqEpoch, strconv.Itoa(testEpoch)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.cli.Put(ctx, keys.Ingest("ingest-1"), "alive"); err != nil {
		t.Fatal(err)
	}
	for range n {
		s := &testStore{dir: t.TempDir()}
		c.stores = append(c.stores, s)
		c.start(t, s)
		t.Cleanup(func() { c.stop(s) })
	}
	return c
}

func (c *testCluster) now() time.Time { return time.Unix(0, c.clock.Load()) }

func (c *testCluster) advance(d time.Duration) { c.clock.Add(int64(d)) }

// start opens the store (a new incarnation if its directory is empty),
// serves it and registers it.
func (c *testCluster) start(t *testing.T, s *testStore) {
	t.Helper()
	store, err := wal.Open(wal.Config{Dir: s.dir})
	if err != nil {
		t.Fatal(err)
	}
	if s.addr == "" {
		s.addr = "127.0.0.1:0"
	}
	lis, err := net.Listen("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	s.addr = lis.Addr().String()
	s.store, s.server = store, wal.Serve(lis, store)
	s.member = ledger.Member{StoreID: store.StoreID(), Incarnation: store.Incarnation(), Address: lis.Addr().String()}
	value, err := ledger.EncodeStoreRegistration(s.member)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.cli.Put(context.Background(), keys.Store(s.member.StoreID), string(value)); err != nil {
		t.Fatal(err)
	}
}

// stop stops serving, closes the store and removes its registration (its
// lease would expire).
func (c *testCluster) stop(s *testStore) {
	if s.server == nil {
		return
	}
	s.server.Stop()
	s.store.Close()
	s.server, s.store = nil, nil
	_, _ = c.cli.Delete(context.Background(), keys.Store(s.member.StoreID))
}

// wipe loses the store's disk: it comes back empty on the same address,
// a new store id and incarnation.
func (c *testCluster) wipe(t *testing.T, s *testStore) {
	t.Helper()
	c.stop(s)
	if err := os.RemoveAll(s.dir); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	old := s.member
	c.start(t, s)
	if s.member.StoreID == old.StoreID || s.member.Address != old.Address {
		t.Fatalf("wiped store is %+v, was %+v", s.member, old)
	}
}

func (c *testCluster) members(idx ...int) []ledger.Member {
	var ms []ledger.Member
	for _, i := range idx {
		ms = append(ms, c.stores[i].member)
	}
	return ms
}

func payloadFor(id uint64, entry int64) []byte {
	return append([]byte(fmt.Sprintf("ledger %d entry %d|", id, entry)), bytes.Repeat([]byte{byte('a' + entry%26)}, int(entry%300))...)
}

// writeClosed creates an ingest ledger on ensemble, appends n entries,
// waits for them to be confirmed and closes it.
func (c *testCluster) writeClosed(t *testing.T, ensemble []ledger.Member, n int64) ledger.Metadata {
	t.Helper()
	ctx := context.Background()
	// Every member acked every entry (its payload handed back) before the
	// close: a confirmation needs only A of them, and tests look for the
	// entries in each member's files.
	acked := make(chan struct{}, n)
	w, err := ledger.Create(ctx, c.cli, ledger.CreateOptions{Epoch: testEpoch, WriterIncarnation: "ingest-1",
		Ensemble: ensemble, W: 3, AckQuorum: 2, Tolerate: 1, Stores: c.dialer,
		Writer: ledger.WriterOptions{ReleasePayload: func([]byte) { acked <- struct{}{} }}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if _, err := w.Append(payloadFor(w.ID(), i), ledger.Span{First: uint64(10 * i), End: uint64(10*i + 10)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.WaitConfirmed(ctx, n-1); err != nil {
		t.Fatal(err)
	}
	wait, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for range n {
		select {
		case <-acked:
		case <-wait.Done():
			t.Fatal("not every member acked every entry")
		}
	}
	m, err := w.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// runWorker runs an elected worker with a short interval on the fake
// clock until the test ends.
func (c *testCluster) runWorker(t *testing.T, grace time.Duration, events *recorded) {
	t.Helper()
	c.runWorkerEvery(t, grace, 20*time.Millisecond, events)
}

// runWorkerEvery runs an elected worker with the given interval.
func (c *testCluster) runWorkerEvery(t *testing.T, grace, interval time.Duration, events *recorded) {
	t.Helper()
	w, err := New(Config{Etcd: c.cli, Stores: c.dialer, Name: "test", Grace: grace, Interval: interval,
		Now: c.now, Events: events.listener()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

// waitEnsemble polls the ledger's metadata until ok accepts it, calling
// tick (if not nil) before each poll.
func (c *testCluster) waitEnsemble(t *testing.T, id uint64, ok func(ledger.Metadata) bool, tick func()) ledger.Metadata {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		if tick != nil {
			tick()
		}
		m, err := ledger.Get(ctx, c.cli, id)
		if err == nil && ok(m) {
			return m
		}
		select {
		case <-ctx.Done():
			t.Fatalf("ledger %d never changed as expected: %+v %v", id, m, err)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// checkEveryMember reads every entry of m from each member alone and
// compares it with want(entry).
func (c *testCluster) checkEveryMember(t *testing.T, m ledger.Metadata, want func(int64) []byte) {
	t.Helper()
	ctx := context.Background()
	for _, member := range m.Ensemble {
		only := m
		only.Ensemble = []ledger.Member{member}
		r, err := ledger.NewReader(only, m.LastEntry, ledger.ReaderOptions{Stores: c.dialer})
		if err != nil {
			t.Fatal(err)
		}
		next := int64(0)
		err = r.Scan(ctx, 0, m.LastEntry, func(e ledger.Entry) error {
			if e.ID != next || !bytes.Equal(e.Payload, want(e.ID)) {
				return fmt.Errorf("entry %d differs", e.ID)
			}
			next++
			return nil
		})
		if err != nil || next != m.LastEntry+1 {
			t.Fatalf("store %s: read %d of %d entries: %v", member.StoreID, next, m.LastEntry+1, err)
		}
	}
}
