package rereplicate

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"orderlog/ingest/ledger"
	"orderlog/proto/walpb"
	"orderlog/sequencer"
)

// passOnce runs one pass of a worker on the test's stores.
func (c *testCluster) passOnce(t *testing.T, events *recorded) {
	t.Helper()
	w, err := New(Config{Etcd: c.cli, Stores: c.dialer, Name: "test", Grace: time.Hour, Now: c.now,
		Events: events.listener(), Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Pass(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// waitServing waits until the test's dialer reaches s (a connection that
// failed while s was down retries only after a backoff).
func (c *testCluster) waitServing(t *testing.T, s *testStore) {
	t.Helper()
	client, err := c.dialer.Client(s.member)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := client.Info(ctx, &walpb.InfoRequest{}, grpc.WaitForReady(true)); err != nil {
		t.Fatalf("store %s at %s: %v", s.member.StoreID, s.addr, err)
	}
}

// damage stops the store as a kill would leave it (no index checkpoint,
// so the next open scans the journal), flips one payload byte of the
// given entry (a record followed by valid ones: damage, not a torn tail)
// and leaves it stopped. The store comes back in the same incarnation
// with damage it must assume may have held any ledger's records.
func (c *testCluster) damage(t *testing.T, s *testStore, payload []byte) {
	t.Helper()
	c.stop(s)
	idx, err := filepath.Glob(filepath.Join(s.dir, "*.idx"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range idx {
		if err := os.Remove(name); err != nil {
			t.Fatal(err)
		}
	}
	segs, err := filepath.Glob(filepath.Join(s.dir, "*.seg"))
	if err != nil || len(segs) == 0 {
		t.Fatalf("segments %v: %v", segs, err)
	}
	b, err := os.ReadFile(segs[0])
	if err != nil {
		t.Fatal(err)
	}
	at := bytes.Index(b, payload)
	if at < 0 {
		t.Fatalf("payload %q not in %s", payload, segs[0])
	}
	b[at+2] ^= 0x40
	if err := os.WriteFile(segs[0], b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// commitLedger writes n records into a commit ledger as the sequencer
// does (sequencer.LedgerClient) on the stores choose returns; after the
// first cut records it calls between (nil: nothing), then closes it.
func (c *testCluster) commitLedger(t *testing.T, choose []ledger.Member, n, cut int, between func()) (*sequencer.LedgerClient, ledger.Metadata) {
	t.Helper()
	ctx := context.Background()
	if _, err := c.cli.Put(ctx, "test/election-key", "leader"); err != nil {
		t.Fatal(err)
	}
	control := &sequencer.LedgerClient{Etcd: c.cli, Stores: c.dialer, Writer: "sequencer-test",
		Replication: sequencer.CommitReplication{W: 3, AckQuorum: 2, Tolerate: 1,
			Choose: func(context.Context) ([]ledger.Member, error) { return choose, nil }}}
	var mu sync.Mutex
	confirmed := int64(-1)
	wake := make(chan struct{}, 1)
	commit, err := control.CreateCommitLog(ctx, testEpoch, "test/election-key", func(lac int64) {
		mu.Lock()
		confirmed = max(confirmed, lac)
		mu.Unlock()
		select {
		case wake <- struct{}{}:
		default:
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	waitConfirmed := func(entry int64) {
		deadline := time.After(10 * time.Second)
		for {
			mu.Lock()
			done := confirmed >= entry
			mu.Unlock()
			if done {
				return
			}
			select {
			case <-wake:
			case <-deadline:
				t.Fatalf("commit entry %d never confirmed", entry)
			}
		}
	}
	for i := range n {
		if i == cut && between != nil {
			waitConfirmed(int64(cut - 1))
			between()
		}
		if _, err := commit.Append(commitRecord(i)); err != nil {
			t.Fatal(err)
		}
	}
	waitConfirmed(int64(n - 1))
	if err := commit.Close(ctx); err != nil {
		t.Fatal(err)
	}
	m, err := ledger.Get(ctx, c.cli, commit.ID())
	if err != nil {
		t.Fatal(err)
	}
	return control, m
}

func commitRecord(i int) []byte { return []byte(fmt.Sprintf("commit record %d", i)) }

// checkCommitLog replays the commit ledger as a new leader does and
// compares every record.
func checkCommitLog(t *testing.T, control *sequencer.LedgerClient, id uint64, n int) {
	t.Helper()
	replay, err := control.ReadCommitLog(context.Background(), id)
	if err != nil || len(replay) != n {
		t.Fatalf("replay of commit ledger %d read %d of %d records: %v", id, len(replay), n, err)
	}
	for i, r := range replay {
		if !bytes.Equal(r, commitRecord(i)) {
			t.Fatalf("commit record %d is %q", i, r)
		}
	}
}

// TestCopyOntoStoreWithDamagedJournal replays the chaos run that left
// ledgers under-replicated: store 0's journal holds a damaged record (a
// flipped byte) and it was down while an ingest ledger and a commit ledger
// were created degraded on stores 1 and 2; then store 2 loses its disk
// and comes back empty at the same address. One pass copies both ledgers
// onto store 0 (restarted, same incarnation) and onto store 2's new
// incarnation, and every entry reads byte-identical from each store alone;
// the commit log replays from store 0 with the others down.
//
// Store 0 answers UNKNOWN to LastEntry for a ledger it first heard of while
// unattributed damage sits in its journal (it cannot rule out entries of
// it in the damage), although it holds every entry the copy wrote. The
// copy read that answer as "holds up to entry -1" and failed on every pass.
func TestCopyOntoStoreWithDamagedJournal(t *testing.T) {
	c := newTestCluster(t, 3)
	ctx := context.Background()
	damaged := c.writeClosed(t, c.members(0, 1, 2), 12)
	c.damage(t, c.stores[0], payloadFor(damaged.ID, 5))

	m := c.writeClosed(t, c.members(1, 2), 300)
	control, commit := c.commitLedger(t, c.members(1, 2), 150, 0, nil)
	if !m.Degraded() || !commit.Degraded() {
		t.Fatalf("ledgers not degraded: %+v %+v", m, commit)
	}
	c.start(t, c.stores[0])
	wiped := c.stores[2].member
	c.wipe(t, c.stores[2])
	c.waitServing(t, c.stores[0])
	c.waitServing(t, c.stores[2])

	var events recorded
	c.passOnce(t, &events)
	for _, id := range []uint64{m.ID, commit.ID} {
		after, err := ledger.Get(ctx, c.cli, id)
		if err != nil {
			t.Fatal(err)
		}
		want := []ledger.Member{c.stores[0].member, c.stores[1].member, c.stores[2].member}
		if after.W != 3 || after.Degraded() || slices.Contains(after.Ensemble, wiped) || !sameMembers(after.Ensemble, want) {
			t.Fatalf("ledger %d after one pass: W=%d ensemble %+v, want %+v", id, after.W, after.Ensemble, want)
		}
		if id == m.ID {
			c.checkEveryMember(t, after, func(e int64) []byte { return payloadFor(m.ID, e) })
		} else {
			c.checkEveryMember(t, after, func(e int64) []byte { return commitRecord(int(e)) })
		}
	}
	c.stop(c.stores[1])
	c.stop(c.stores[2])
	checkCommitLog(t, control, commit.ID, 150)
}

// TestMemberMissingTheTailIsBackfilled replays the chaos run whose next
// leader could not replay its commit ledger: store 2 was down while the
// last commit records were written, so it holds only a prefix of the
// closed ledger although it is registered in the incarnation the ledger
// names. A pass must not count it as a copy of the entries it lacks: it
// fills it up. Then store 0 loses its disk and store 1 is killed before
// any further pass, and the commit log still replays from store 2.
// Before, the worker counted store 2 as a full copy and did nothing; the
// replay failed with "no store could serve the entry".
func TestMemberMissingTheTailIsBackfilled(t *testing.T) {
	c := newTestCluster(t, 3)
	const n, cut = 120, 70
	control, commit := c.commitLedger(t, c.members(0, 1, 2), n, cut, func() { c.stop(c.stores[2]) })
	c.start(t, c.stores[2])
	c.waitServing(t, c.stores[2])
	if commit.W != 3 || commit.LastEntry < cut {
		t.Fatalf("commit ledger %+v", commit)
	}

	var events recorded
	c.passOnce(t, &events)
	after, err := ledger.Get(context.Background(), c.cli, commit.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !sameMembers(after.Ensemble, c.members(0, 1, 2)) || after.W != 3 {
		t.Fatalf("ensemble after the pass %+v", after.Ensemble)
	}
	c.checkEveryMember(t, after, func(e int64) []byte { return commitRecord(int(e)) })

	c.wipe(t, c.stores[0])
	c.stop(c.stores[1])
	checkCommitLog(t, control, commit.ID, n)
}

// sameMembers reports whether a and b hold the same members in any order.
func sameMembers(a, b []ledger.Member) bool {
	return len(a) == len(b) && !slices.ContainsFunc(a, func(m ledger.Member) bool { return !slices.Contains(b, m) })
}
