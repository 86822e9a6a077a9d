package ledger

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"orderlog/ingest/wal/walfs"
	"orderlog/proto/walpb"
)

// TestUnreadableStoreIsNeverAbsent: entries 10..14 are confirmed on slots 0
// and 1 only. Slot 0's disk then fails every segment read (a walfs.ErrorFS
// under its WAL store) and the recoverer cannot reach slot 1. Slot 2's
// ABSENT plus slot 0 answering ABSENT for what it cannot read would end
// the ledger at 9 and lose five confirmed entries; slot 0 must answer
// UNKNOWN, the recovery must keep asking, and once the disk reads again it
// closes the ledger with every confirmed entry.
func TestUnreadableStoreIsNeverAbsent(t *testing.T) {
	c := newTestCluster(t, 3, 13)
	efs := walfs.NewErrorFS(walfs.OS{})
	c.slots[0].open = openWALOn(efs)
	c.slots[0].restart(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w := c.create(t, 2, 1, WriterOptions{UnreachableAfter: time.Hour})
	appendRange(t, w, 0, 10)
	if err := w.WaitConfirmed(ctx, 9); err != nil {
		t.Fatal(err)
	}
	c.net.partition("writer", c.slots[2].name, true)
	appendRange(t, w, 10, 15)
	if err := w.WaitConfirmed(ctx, 14); err != nil {
		t.Fatal(err)
	}
	eio := efs.AddRule(walfs.Rule{Ops: []walfs.Op{walfs.OpRead}, Path: walfs.Glob("*.seg"), Action: walfs.Fail(syscall.EIO)})
	c.net.cutReads("recovery", c.slots[1].name, true)

	slot0 := c.slots[0].member()
	stop, cancelStop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := Recover(stop, c.cli, w.ID(), RecoverOptions{Stores: c.net.dialer("recovery")})
		done <- err
	}()
	// Wait until slot 0 has answered UNKNOWN again and again (counted
	// answers, not time) and the recovery is still going.
	const askedAgain = 5
	for unknownAnswers(c, slot0, w.ID(), 0, 15) < askedAgain {
		select {
		case err := <-done:
			m, _ := Get(ctx, c.cli, w.ID())
			t.Fatalf("Recover ended (%v, ledger %+v) while slot 0 could not read; want it still asking", err, m)
		case <-ctx.Done():
			t.Fatalf("slot 0 answered UNKNOWN only %d times", unknownAnswers(c, slot0, w.ID(), 0, 15))
		case <-c.net.answered():
		}
	}
	cancelStop()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Recover stopped with %v, want it canceled while waiting", err)
	}
	if efs.Hits(eio) == 0 {
		t.Fatal("no segment read failed")
	}

	efs.RemoveRule(eio)
	c.net.cutReads("recovery", c.slots[1].name, false)
	m, err := Recover(ctx, c.cli, w.ID(), RecoverOptions{Stores: c.net.dialer("recovery")})
	if err != nil {
		t.Fatal(err)
	}
	if m.LastEntry != 14 {
		t.Fatalf("recovered last %d, want 14", m.LastEntry)
	}
	checkClosedLedger(t, ctx, c, m)
	if closed, err := w.Close(ctx); err != nil || closed.LastEntry != 14 {
		t.Fatalf("writer close = %+v, %v", closed, err)
	}
	if v := c.net.violations(); len(v) > 0 {
		t.Fatalf("store answers contradicted acks:\n%v", v)
	}
}

// unknownAnswers is how many UNKNOWN answers the store gave for entries
// [from, to) of the ledger.
func unknownAnswers(c *testCluster, store Member, ledgerID uint64, from, to int64) int {
	n := 0
	for e := from; e < to; e++ {
		n += c.net.answersFor(store, ledgerID, e, walpb.EntryStatus_UNKNOWN)
	}
	return n
}
