package ledger

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// Integration: embedded etcd, real WAL stores over gRPC on loopback, no
// injected reply faults; one store's disk is wiped mid-test (f for W=5).

func TestIntegrationDiskWipe(t *testing.T) {
	for _, cfg := range []struct{ w, a, f int }{{3, 2, 1}, {5, 3, 2}} {
		t.Run(fmt.Sprintf("W=%d_A=%d", cfg.w, cfg.a), func(t *testing.T) {
			integrationDiskWipe(t, cfg.w, cfg.a, cfg.f)
		})
	}
}

func integrationDiskWipe(t *testing.T, w, a, f int) {
	c := newTestCluster(t, w, 7)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n = 400

	// Ledger 1: its writer survives the wipe of f stores and closes.
	wr := c.create(t, a, f, WriterOptions{MaxFrameEntries: 32, UnreachableAfter: time.Minute})
	appendRange(t, wr, 0, n/2)
	if err := wr.WaitConfirmed(ctx, n/2-1); err != nil {
		t.Fatal(err)
	}
	for i := range f {
		c.slots[1+i].restart(t, true) // comes back empty: a new incarnation
	}
	appendRange(t, wr, n/2, n)
	if err := wr.WaitConfirmed(ctx, n-1); err != nil {
		t.Fatalf("writer did not confirm with %d of %d stores wiped: %v", f, w, err)
	}
	m, err := wr.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if m.LastEntry != n-1 {
		t.Fatalf("closed at %d, want %d", m.LastEntry, n-1)
	}
	checkClosedLedger(t, ctx, c, m) // readers fall back past the wiped stores (UNKNOWN)

	// Ledger 2: created on the new incarnations; its writer is abandoned
	// mid-stream while another store is wiped, and a recovery closes it.
	wr2 := c.create(t, a, f, WriterOptions{MaxFrameEntries: 32})
	appendRange(t, wr2, 0, n/2)
	if err := wr2.WaitConfirmed(ctx, n/2-1); err != nil {
		t.Fatal(err)
	}
	c.slots[0].restart(t, true)
	appendRange(t, wr2, n/2, n)
	confirmed := wr2.LAC()
	rec, err := Recover(ctx, c.cli, wr2.ID(), RecoverOptions{Stores: c.net.dialer("recovery")})
	if err != nil {
		t.Fatal(err)
	}
	if rec.LastEntry < confirmed || rec.LastEntry >= n {
		t.Fatalf("recovered last %d, writer had confirmed %d of %d", rec.LastEntry, confirmed, n)
	}
	checkClosedLedger(t, ctx, c, rec)
	closed, err := wr2.Close(ctx)
	if err != nil || closed.LastEntry != rec.LastEntry {
		t.Fatalf("writer close after recovery: %+v, %v; recovered %d", closed, err, rec.LastEntry)
	}
	if lac := wr2.LAC(); lac > rec.LastEntry {
		t.Fatalf("fenced writer's LAC %d beyond %d", lac, rec.LastEntry)
	}
	if v := c.net.violations(); len(v) > 0 {
		t.Fatal(v)
	}
	all, err := List(ctx, c.cli, Filter{States: []State{StateClosed}})
	if err != nil || len(all) != 2 {
		t.Fatalf("List closed = %d ledgers, %v", len(all), err)
	}
}

func appendRange(t *testing.T, w *Writer, from, to int64) {
	t.Helper()
	for i := from; i < to; i++ {
		id, err := w.Append(payloadFor(w.ID(), i), spanFor(i))
		if err != nil || id != i {
			t.Fatalf("Append(%d) = %d, %v", i, id, err)
		}
	}
}

// TestQuorumLostReopensOnNewEnsemble: the writer is cut from two of its
// three stores, fails with ErrQuorumLost, closes at its LAC and writes the
// unconfirmed entries again into a new ledger on another ensemble.
func TestQuorumLostReopensOnNewEnsemble(t *testing.T) {
	c := newTestCluster(t, 5, 11)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	all := c.ensemble()
	first, err := Create(ctx, c.cli, CreateOptions{Epoch: c.epoch, WriterIncarnation: c.writer, Ensemble: all[:3],
		AckQuorum: 2, Tolerate: 1, Stores: c.net.dialer("writer"),
		Writer: WriterOptions{UnreachableAfter: 3 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	const n = 100
	var payloads [][]byte
	add := func(i int) {
		p := []byte(fmt.Sprintf("message %d", i))
		payloads = append(payloads, p)
		if _, err := first.Append(p, Span{}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n / 2 {
		add(i)
	}
	if err := first.WaitConfirmed(ctx, n/2-1); err != nil {
		t.Fatal(err)
	}
	c.net.partition("writer", c.slots[1].name, true)
	c.net.partition("writer", c.slots[2].name, true)
	for i := n / 2; i < n; i++ {
		add(i)
	}
	if err := first.WaitConfirmed(ctx, n-1); !errors.Is(err, ErrQuorumLost) {
		t.Fatalf("WaitConfirmed with 1 of 3 stores: %v, want ErrQuorumLost", err)
	}
	m1, err := first.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rest := first.Unconfirmed(m1.LastEntry)
	if int64(len(rest)) != n-1-m1.LastEntry {
		t.Fatalf("%d unconfirmed entries beyond %d of %d", len(rest), m1.LastEntry, n)
	}
	second, err := Create(ctx, c.cli, CreateOptions{Epoch: c.epoch, WriterIncarnation: c.writer,
		Ensemble: []Member{all[0], all[3], all[4]}, AckQuorum: 2, Tolerate: 1, Stores: c.net.dialer("writer")})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range rest {
		if _, err := second.Append(e.Payload, e.Span); err != nil {
			t.Fatal(err)
		}
	}
	if err := second.WaitConfirmed(ctx, int64(len(rest))-1); err != nil {
		t.Fatal(err)
	}
	m2, err := second.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got [][]byte
	for _, m := range []Metadata{m1, m2} {
		r, err := OpenReader(ctx, c.cli, m.ID, ReaderOptions{Stores: c.net.dialer("reader")})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Scan(ctx, 0, r.Last(), func(e Entry) error { got = append(got, e.Payload); return nil }); err != nil {
			t.Fatal(err)
		}
	}
	if len(got) != n {
		t.Fatalf("read back %d entries across both ledgers, want %d", len(got), n)
	}
	for i := range got {
		if !bytes.Equal(got[i], payloads[i]) {
			t.Fatalf("entry %d is %q, want %q", i, got[i], payloads[i])
		}
	}
}
