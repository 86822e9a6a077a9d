package ledger

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"orderlog/internal/keys"
)

func TestLostMembersAreReplacedOrWipedStores(t *testing.T) {
	ensemble := []Member{
		{StoreID: "a", Incarnation: 1, Address: "h1:7070"}, // registered as it is: sound
		{StoreID: "b", Incarnation: 1, Address: "h2:7070"}, // came back empty: lost
		{StoreID: "c", Incarnation: 1, Address: "h3:7070"}, // its address holds another store: lost
		{StoreID: "d", Incarnation: 1, Address: "h4:7070"}, // unregistered: may come back
	}
	registered := []Member{
		{StoreID: "a", Incarnation: 1, Address: "h1:7070"},
		{StoreID: "b", Incarnation: 2, Address: "h2:7070"},
		{StoreID: "e", Incarnation: 1, Address: "h3:7070"},
	}
	if got, want := LostMembers(ensemble, registered), []bool{false, true, true, false}; !slices.Equal(got, want) {
		t.Fatalf("lost %v, want %v", got, want)
	}
	// A wiped store's old registration lingers until its lease expires,
	// registered before the new store at its address: lost all the same.
	// The new store, registered last, is not.
	lingering := []Member{
		{StoreID: "c", Incarnation: 1, Address: "h3:7070"},
		{StoreID: "e", Incarnation: 1, Address: "h3:7070"},
	}
	if got, want := LostMembers(ensemble[2:3], lingering), []bool{true}; !slices.Equal(got, want) {
		t.Fatalf("lost %v with the old registration lingering, want %v", got, want)
	}
	if got := LostMembers([]Member{lingering[1]}, lingering); got[0] {
		t.Fatal("the newest store at an address counted lost")
	}
	// A store registered as itself at a new address is not lost because
	// another store took its old one.
	moved := []Member{
		{StoreID: "c", Incarnation: 1, Address: "h9:7070"},
		{StoreID: "e", Incarnation: 1, Address: "h3:7070"},
	}
	if got := LostMembers(ensemble[2:3], moved); got[0] {
		t.Fatal("a store that moved to another address counted lost")
	}
}

// register records the slots' current incarnations in etcd, as their
// nodes do.
func register(t *testing.T, c *testCluster, slots ...*storeSlot) {
	t.Helper()
	for _, s := range slots {
		m := s.member()
		b, err := EncodeStoreRegistration(m)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.cli.Put(context.Background(), keys.Store(m.StoreID), string(b)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRecoveryClosesWhenTooFewMembersAreLeft: a ledger on two stores with
// A=2 (created degraded while a third was away). Entries 10 and 11 reached
// only store 0; then store 1 lost its disk and came back empty, registered
// as a new incarnation. No entry can ever be on A stores of this ensemble
// again, and store 1 never answers ABSENT for it: recovery rolls forward
// onto the members left and closes at 11 with those copies (re-replication
// restores the count) instead of waiting for ever. Before, a new sequencer
// leader waited on such a commit ledger until the chaos run gave up.
func TestRecoveryClosesWhenTooFewMembersAreLeft(t *testing.T) {
	c := newTestCluster(t, 2, 17)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	register(t, c, c.slots...)
	w := c.create(t, 2, 1, WriterOptions{})
	appendRange(t, w, 0, 10)
	if err := w.WaitConfirmed(ctx, 9); err != nil {
		t.Fatal(err)
	}
	c.net.partition("writer", c.slots[1].name, true)
	appendRange(t, w, 10, 12) // on store 0 only: never confirmed
	old := c.slots[1].member()
	c.slots[1].restart(t, true)
	if _, err := c.cli.Delete(ctx, keys.Store(old.StoreID)); err != nil { // its lease ended with it
		t.Fatal(err)
	}
	register(t, c, c.slots[1])

	m, err := Recover(ctx, c.cli, w.ID(), RecoverOptions{Stores: c.net.dialer("recovery"), CallTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if m.State != StateClosed || m.LastEntry != 11 {
		t.Fatalf("recovered %+v, want closed at 11", m)
	}
	r, err := NewReader(m, m.LastEntry, ReaderOptions{Stores: c.net.dialer("reader")})
	if err != nil {
		t.Fatal(err)
	}
	for id := int64(0); id <= 11; id++ {
		e, err := r.Read(ctx, id)
		if err != nil || string(e.Payload) != string(payloadFor(w.ID(), id)) {
			t.Fatalf("entry %d: %q %v", id, e.Payload, err)
		}
	}
}

// TestLiveStoresLeavesOutSupersededRegistrations: a store registered at an
// address another store registered at since (a wiped or replaced disk,
// whose old registration lingers until its lease expires) is not listed:
// ensembles chosen from the list would land on it and roll at once.
func TestLiveStoresLeavesOutSupersededRegistrations(t *testing.T) {
	cli := startEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, m := range []Member{
		{StoreID: "old", Incarnation: 1, Address: "h1:7070"},
		{StoreID: "other", Incarnation: 1, Address: "h2:7070"},
		{StoreID: "new", Incarnation: 2, Address: "h1:7070"}, // registered last, at old's address
	} {
		b, err := EncodeStoreRegistration(m)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cli.Put(ctx, keys.Store(m.StoreID), string(b)); err != nil {
			t.Fatal(err)
		}
	}
	live, err := LiveStores(ctx, cli)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range live {
		ids = append(ids, m.StoreID)
	}
	if want := []string{"other", "new"}; !slices.Equal(ids, want) {
		t.Fatalf("live stores %v, want %v", ids, want)
	}
}

// TestLedgersOnADamagedStoreAreWeak: a store whose journal damage may hide
// records of ledgers up to some id says so in its registration, and every
// ledger at or below that id with it as a member is weak (its owner rolls
// it); later ledgers, and the same store in another incarnation, are not.
func TestLedgersOnADamagedStoreAreWeak(t *testing.T) {
	damaged := Member{StoreID: "s1", Incarnation: 1, Address: "a", MayHideThrough: 162}
	raw, err := EncodeStoreRegistration(damaged)
	if err != nil {
		t.Fatal(err)
	}
	back, err := DecodeStoreRegistration(raw)
	if err != nil || back != damaged {
		t.Fatalf("registration round trip: %+v, %v; want %+v", back, err, damaged)
	}
	registered := []Member{back, {StoreID: "s2", Incarnation: 2, Address: "b"}, {StoreID: "s3", Incarnation: 3, Address: "c"}}
	ensemble := []Member{{StoreID: "s1", Incarnation: 1, Address: "a"}, {StoreID: "s2", Incarnation: 2, Address: "b"}, {StoreID: "s3", Incarnation: 3, Address: "c"}}
	for _, c := range []struct {
		id   uint64
		weak bool
	}{{161, true}, {162, true}, {163, false}} {
		m := Metadata{ID: c.id, W: 3, A: 2, Ensemble: ensemble}
		if got := Weakness(m, registered) != ""; got != c.weak {
			t.Errorf("ledger %d on a store whose damage may hide ledgers up to 162: weak %v, want %v (%q)", c.id, got, c.weak, Weakness(m, registered))
		}
	}
	for _, m := range ensemble {
		if m.MayHideThrough != 0 {
			t.Fatal("test setup: ensembles never carry damage")
		}
	}
	meta, err := json.Marshal(Metadata{ID: 1, Ensemble: []Member{damaged}})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(meta), "162") {
		t.Errorf("ledger metadata carries a registration's damage: %s", meta)
	}
}
