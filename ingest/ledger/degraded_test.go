package ledger

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"orderlog/proto/walpb"
)

// TestDegradedLedgerAcksOnAStores: with one of three stores down, a ledger
// meant for W=3 at A=2 is created on the two live stores (it used to be
// refused for W < 2f+1); its entries are confirmed on both, and the
// metadata in etcd records W=2 of an intended 3, so re-replication knows
// it is under-replicated.
func TestDegradedLedgerAcksOnAStores(t *testing.T) {
	c := newTestCluster(t, 3, 1)
	ctx := context.Background()
	c.slots[2].crash()
	live := []Member{c.slots[0].member(), c.slots[1].member()}
	w, err := Create(ctx, c.cli, CreateOptions{Epoch: c.epoch, WriterIncarnation: c.writer, Ensemble: live,
		W: 3, AckQuorum: 2, Tolerate: 1, Stores: c.net.dialer("writer")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopWriter(w) })
	const n = 40
	for i := range int64(n) {
		if _, err := w.Append(payloadFor(w.ID(), i), spanFor(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.WaitConfirmed(ctx, n-1); err != nil {
		t.Fatal(err)
	}
	stored, err := Get(ctx, c.cli, w.ID())
	if err != nil {
		t.Fatal(err)
	}
	if stored.W != 2 || stored.IntendedW != 3 || !stored.Degraded() || stored.Version != MetadataVersionDegraded {
		t.Fatalf("metadata of a degraded ledger: %+v", stored)
	}
	m, err := w.Close(ctx)
	if err != nil || m.LastEntry != n-1 || !m.Degraded() {
		t.Fatalf("Close = %+v, %v", m, err)
	}
	for _, member := range live { // every ack was on both live stores
		cl, _ := c.net.dialer("check").Client(member)
		last, err := cl.LastEntry(ctx, &walpb.LastEntryRequest{LedgerId: m.ID, StoreIncarnation: member.Incarnation})
		if err != nil || last.LastEntry != n-1 {
			t.Fatalf("store %s holds up to %v, %v", member.StoreID, last, err)
		}
	}
}

// TestCreateNeedsAStores: fewer live stores than A is refused with
// ErrTooFewStores; an ensemble smaller than 2f+1 without an explicit W is
// recorded as meant for 2f+1.
func TestCreateNeedsAStores(t *testing.T) {
	c := newTestCluster(t, 2, 1)
	ctx := context.Background()
	one := []Member{c.slots[0].member()}
	_, err := Create(ctx, c.cli, CreateOptions{Epoch: c.epoch, WriterIncarnation: c.writer, Ensemble: one,
		W: 3, AckQuorum: 2, Tolerate: 1, Stores: c.net.dialer("writer")})
	if !errors.Is(err, ErrTooFewStores) {
		t.Fatalf("Create on 1 store at A=2: %v, want ErrTooFewStores", err)
	}
	w, err := Create(ctx, c.cli, CreateOptions{Epoch: c.epoch, WriterIncarnation: c.writer, Ensemble: c.ensemble(),
		AckQuorum: 2, Tolerate: 1, Stores: c.net.dialer("writer")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopWriter(w) })
	if m := w.Metadata(); m.W != 2 || m.IntendedW != 3 {
		t.Fatalf("2 stores at f=1 without W: %+v", m)
	}
}

// TestCopyClosedOntoAWipedStore: a store that lost its disk while a ledger
// was open and then got the writer's close (so it holds the ledger closed
// and empty) takes a full copy; after ChangeEnsemble a reader of the new
// ensemble reads every entry byte-identical from the new member alone.
func TestCopyClosedOntoAWipedStore(t *testing.T) {
	c := newTestCluster(t, 3, 1)
	ctx := context.Background()
	w := c.create(t, 2, 1, WriterOptions{})
	const n = 600
	for i := range int64(n) {
		if _, err := w.Append(payloadFor(w.ID(), i), spanFor(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.WaitConfirmed(ctx, n-1); err != nil {
		t.Fatal(err)
	}
	c.slots[2].restart(t, true)
	m, err := w.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fresh := c.slots[2].member()
	cl, _ := c.net.dialer("check").Client(fresh)
	if _, err := cl.CloseLedger(ctx, &walpb.CloseLedgerRequest{LedgerId: m.ID, StoreIncarnation: m.Ensemble[2].Incarnation, LastEntry: m.LastEntry}); err != nil {
		t.Fatal(err)
	}
	opts := CopyOptions{Stores: c.net.dialer("copy"), MaxFrameEntries: 50}
	if err := CopyClosed(ctx, m, m.Ensemble[:2], fresh, opts); err != nil {
		t.Fatal(err)
	}
	if err := CopyClosed(ctx, m, m.Ensemble[:2], fresh, opts); err != nil {
		t.Fatalf("copy again: %v", err)
	}
	changed, err := ChangeEnsemble(ctx, c.cli, m, []Member{m.Ensemble[0], m.Ensemble[1], fresh})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ChangeEnsemble(ctx, c.cli, m, []Member{m.Ensemble[0], fresh}); !errors.Is(err, ErrEnsembleChanged) {
		t.Fatalf("change on a stale read: %v", err)
	}
	stored, err := Get(ctx, c.cli, m.ID)
	if err != nil || stored.Ensemble[2] != fresh || stored.ModRevision != changed.ModRevision || stored.LastEntry != m.LastEntry {
		t.Fatalf("stored %+v, %v", stored, err)
	}
	only := stored
	only.Ensemble = []Member{fresh}
	r, err := NewReader(only, only.LastEntry, ReaderOptions{Stores: c.net.dialer("reader")})
	if err != nil {
		t.Fatal(err)
	}
	next := int64(0)
	err = r.Scan(ctx, 0, only.LastEntry, func(e Entry) error {
		if e.ID != next || !bytes.Equal(e.Payload, payloadFor(m.ID, e.ID)) || e.Span != spanFor(e.ID) {
			t.Fatalf("entry %d differs on the copy", e.ID)
		}
		next++
		return nil
	})
	if err != nil || next != n {
		t.Fatalf("read %d entries from the copy: %v", next, err)
	}
	checkClosedLedger(t, ctx, c, stored)
}
