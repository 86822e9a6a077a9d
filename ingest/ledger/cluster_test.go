package ledger

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"orderlog/proto/walpb"
)

// testCluster is embedded etcd plus store slots behind a fault network.
type testCluster struct {
	cli    *clientv3.Client
	slots  []*storeSlot
	net    *faultNet
	epoch  int64
	writer string
}

func newTestCluster(t testing.TB, stores int, seed uint64) *testCluster {
	t.Helper()
	c := &testCluster{cli: startEtcd(t), epoch: 3, writer: "ingest-1"}
	setEpochAndWriter(t, c.cli, c.epoch, c.writer)
	open := testBackend(t)
	for i := range stores {
		c.slots = append(c.slots, newSlot(t, fmt.Sprintf("slot-%d", i), open))
	}
	c.net = newFaultNet(seed, c.slots)
	return c
}

func (c *testCluster) ensemble() []Member {
	var ms []Member
	for _, s := range c.slots {
		ms = append(ms, s.member())
	}
	return ms
}

func (c *testCluster) create(t testing.TB, ackQuorum, tolerate int, o WriterOptions) *Writer {
	t.Helper()
	w, err := Create(context.Background(), c.cli, CreateOptions{
		Epoch: c.epoch, WriterIncarnation: c.writer, Ensemble: c.ensemble(),
		AckQuorum: ackQuorum, Tolerate: tolerate, Stores: c.net.dialer("writer"), Writer: o,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopWriter(w) })
	return w
}

// stopWriter ends the goroutines of a writer the test left open (fenced by
// a recovery, or abandoned), without recording anything: Close with a
// context that is already done stops the writer's loops, then fails before
// it reaches etcd. A writer the test closed answers ErrClosed.
func stopWriter(w *Writer) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, _ = w.Close(ctx)
}

// payloadFor is the content of entry id of a ledger: distinct per entry,
// of varying length.
func payloadFor(ledgerID uint64, id int64) []byte {
	head := fmt.Sprintf("ledger %d entry %d|", ledgerID, id)
	return append([]byte(head), bytes.Repeat([]byte{byte('a' + id%26)}, int(id%97))...)
}

// spanFor gives entry id the offsets [10·id, 10·id+10), except every
// seventh entry, which carries none.
func spanFor(id int64) Span {
	if id%7 == 6 {
		return Span{}
	}
	return Span{First: uint64(10 * id), End: uint64(10*id + 10)}
}

// checkClosedLedger verifies the closed ledger is a dense prefix of what
// the writer appended: every entry 0..last readable with its bytes and
// span, and the recorded offset range is the hull of their spans.
func checkClosedLedger(t testing.TB, ctx context.Context, c *testCluster, m Metadata) {
	t.Helper()
	r, err := OpenReader(ctx, c.cli, m.ID, ReaderOptions{Stores: c.net.dialer("checker")})
	if err != nil {
		t.Fatal(err)
	}
	next := int64(0)
	var first, end uint64
	seen := false
	err = r.Scan(ctx, 0, m.LastEntry, func(e Entry) error {
		if e.ID != next {
			return fmt.Errorf("entry %d where %d expected", e.ID, next)
		}
		if !bytes.Equal(e.Payload, payloadFor(m.ID, e.ID)) || e.Span != spanFor(e.ID) {
			return fmt.Errorf("entry %d has the wrong content", e.ID)
		}
		if !e.Span.Empty() {
			if !seen {
				first, seen = e.Span.First, true
			}
			end = e.Span.End
		}
		next++
		return nil
	})
	if err != nil {
		for i, sl := range c.slots {
			if cl, ok := sl.client(); ok {
				last, lerr := cl.LastEntry(ctx, &walpb.LastEntryRequest{LedgerId: m.ID, StoreIncarnation: m.Ensemble[i].Incarnation})
				t.Logf("slot %s: %v %v", sl.name, last, lerr)
			}
		}
		t.Fatalf("closed ledger %d (last %d) not a dense readable prefix: %v", m.ID, m.LastEntry, err)
	}
	if m.FirstOffset != first || m.EndOffset != end {
		t.Fatalf("ledger %d offsets [%d, %d), entries span [%d, %d)", m.ID, m.FirstOffset, m.EndOffset, first, end)
	}
	if _, err := r.Read(ctx, m.LastEntry+1); err == nil {
		t.Fatalf("reader served entry %d beyond last %d", m.LastEntry+1, m.LastEntry)
	}
}

func TestWriteConfirmCloseRead(t *testing.T) {
	c := newTestCluster(t, 3, 1)
	ctx := context.Background()
	var reported []int64
	w := c.create(t, 2, 1, WriterOptions{MaxFrameEntries: 8, OnConfirm: func(lac int64) { reported = append(reported, lac) }})
	const n = 300
	for i := range int64(n) {
		id, err := w.Append(payloadFor(w.ID(), i), spanFor(i))
		if err != nil || id != i {
			t.Fatalf("Append %d = %d, %v", i, id, err)
		}
	}
	if err := w.WaitConfirmed(ctx, n-1); err != nil {
		t.Fatal(err)
	}
	m, err := w.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if m.State != StateClosed || m.LastEntry != n-1 {
		t.Fatalf("closed metadata %+v", m)
	}
	for i := 1; i < len(reported); i++ {
		if reported[i] <= reported[i-1] {
			t.Fatalf("OnConfirm went %d then %d", reported[i-1], reported[i])
		}
	}
	if len(reported) == 0 || reported[len(reported)-1] != n-1 {
		t.Fatalf("OnConfirm reports %v, last should be %d", reported, n-1)
	}
	checkClosedLedger(t, ctx, c, m)
	again, err := Recover(ctx, c.cli, m.ID, RecoverOptions{Stores: c.net.dialer("recovery")})
	if err != nil || again.LastEntry != m.LastEntry || again.ModRevision != m.ModRevision {
		t.Fatalf("Recover of a closed ledger = %+v, %v", again, err)
	}
	if _, err := w.Append(nil, Span{}); err != ErrClosed {
		t.Fatalf("Append after Close: %v", err)
	}
}

// TestCloseCanBeRetriedAfterAFailure: a Close whose etcd step fails (here:
// its context is already done) leaves the writer frozen; a later Close
// finishes it at the same last entry instead of refusing forever, which
// left the ingest node unable to open a new ledger.
func TestCloseCanBeRetriedAfterAFailure(t *testing.T) {
	c := newTestCluster(t, 1, 1)
	ctx := context.Background()
	w := c.create(t, 1, 0, WriterOptions{})
	const n = 5
	for i := range int64(n) {
		if _, err := w.Append(payloadFor(w.ID(), i), spanFor(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.WaitConfirmed(ctx, n-1); err != nil {
		t.Fatal(err)
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := w.Close(done); err == nil {
		t.Fatal("Close with a cancelled context succeeded")
	}
	if _, err := w.Append(nil, Span{}); err != ErrClosed {
		t.Fatalf("Append after a failed Close: %v", err)
	}
	m, err := w.Close(ctx)
	if err != nil || m.State != StateClosed || m.LastEntry != n-1 {
		t.Fatalf("retried Close = %+v, %v", m, err)
	}
	checkClosedLedger(t, ctx, c, m)
	if _, err := w.Close(ctx); err != ErrClosed {
		t.Fatalf("Close after a successful one: %v", err)
	}
}

func TestAppendRejectsBackwardSpan(t *testing.T) {
	c := newTestCluster(t, 1, 1)
	w := c.create(t, 1, 0, WriterOptions{})
	if _, err := w.Append([]byte("a"), Span{First: 10, End: 20}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Append([]byte("b"), Span{First: 15, End: 30}); err == nil {
		t.Fatal("span starting before the previous end accepted")
	}
	if _, err := w.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// The close records what each topic's messages take in the confirmed
// entries, and the payload bytes, in the ledger's record.
func TestCloseRecordsTheTopicsBytes(t *testing.T) {
	c := newTestCluster(t, 1, 1)
	ctx := context.Background()
	w := c.create(t, 1, 0, WriterOptions{})
	entries := [][]TopicBytes{
		{{"a", 10}, {"b", 5}},
		nil, // a snapshot
		{{"b", 7}},
	}
	var payloads int64
	for i, topics := range entries {
		payload := payloadFor(w.ID(), int64(i))
		payloads += int64(len(payload))
		if _, err := w.AppendCounted(payload, spanFor(int64(i)), topics); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.WaitConfirmed(ctx, int64(len(entries)-1)); err != nil {
		t.Fatal(err)
	}
	m, err := w.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stored, err := Get(ctx, c.cli, m.ID)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]int64{"a": 10, "b": 12}; !maps.Equal(stored.TopicBytes, want) || stored.Bytes != payloads {
		t.Fatalf("record: topic bytes %v, bytes %d; want %v, %d", stored.TopicBytes, stored.Bytes, want, payloads)
	}
}

func TestTopicCountsStopAtTheCap(t *testing.T) {
	var c topicCounts
	for i := range MaxCountedTopics + 5 {
		c.add([]TopicBytes{{Topic: fmt.Sprint(i), Bytes: 1}})
	}
	c.add([]TopicBytes{{Topic: "0", Bytes: 2}})
	if len(c) != MaxCountedTopics || c["0"] != 3 {
		t.Fatalf("%d topics counted (want %d), topic 0: %d (want 3)", len(c), MaxCountedTopics, c["0"])
	}
}
