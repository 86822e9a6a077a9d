package ingest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	"orderlog/internal/apierr"
	"orderlog/internal/etcdtest"
	"orderlog/internal/keys"
	"orderlog/internal/partition"
	"orderlog/proto/orderlogpb"
)

func startEtcd(t *testing.T) *clientv3.Client { return etcdtest.Client(t) }

// live registers the liveness keys of owner incarnations: a producer record
// can only name a live owner.
func live(t *testing.T, cli *clientv3.Client, owners ...string) {
	t.Helper()
	for _, owner := range owners {
		if _, err := cli.Put(context.Background(), keys.Ingest(owner), "0"); err != nil {
			t.Fatal(err)
		}
	}
}

// A node whose lease is gone cannot take a producer, create one or record a
// state ledger: it may not have noticed, and would serve the producer from
// a session another node has moved past.
func TestAnOwnerWithoutLivenessKeyTakesNothing(t *testing.T) {
	cli := startEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	live(t, cli, "node-a")
	if _, _, err := registerProducer(ctx, cli, "new", "node-gone"); !errors.Is(err, errNotLive) {
		t.Fatalf("a producer created for a gone owner: %v", err)
	}
	rec, _, err := registerProducer(ctx, cli, "orders-app", "node-a")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := registerProducer(ctx, cli, "orders-app", "node-gone"); !errors.Is(err, errNotLive) {
		t.Fatalf("registered to a gone owner: %v", err)
	}
	if _, _, err := takeOwnership(ctx, cli, rec.ID, rec.Epoch, "node-gone"); !errors.Is(err, errNotLive) {
		t.Fatalf("taken over by a gone owner: %v", err)
	}
	if _, err := cli.Delete(ctx, keys.Ingest("node-a")); err != nil {
		t.Fatal(err)
	}
	if err := recordStateLedger(ctx, cli, rec.ID, "node-a", rec.Gen, 7); !errors.Is(err, errNotLive) {
		t.Fatalf("a state ledger recorded by an owner whose lease is gone: %v", err)
	}
}

// TestRegisterProducerCreatesThenBumpsEpochAndOwner: a new name gets id,
// epoch 1 and the caller as owner. Registering it again bumps the epoch; a
// live owner stays the owner (the caller's takeover then has it hand the
// producer over), a gone one is replaced by the caller at once.
func TestRegisterProducerCreatesThenBumpsEpochAndOwner(t *testing.T) {
	cli := startEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	live(t, cli, "node-a", "node-b")
	first, previous, err := registerProducer(ctx, cli, "orders-app", "node-a")
	if err != nil {
		t.Fatal(err)
	}
	if first.ID != 1 || first.Epoch != 1 || first.Owner != "node-a" || previous.ID != 0 {
		t.Fatalf("first %+v previous %+v", first, previous)
	}
	other, _, err := registerProducer(ctx, cli, "billing", "node-a")
	if err != nil || other.ID != 2 {
		t.Fatalf("second producer %+v %v", other, err)
	}
	again, previous, err := registerProducer(ctx, cli, "orders-app", "node-b")
	if err != nil {
		t.Fatal(err)
	}
	if again.ID != 1 || again.Epoch != 2 || again.Owner != "node-a" || again.Gen != 1 || previous.Owner != "node-a" {
		t.Fatalf("again %+v previous %+v: want epoch 2, still owned by the live node-a", again, previous)
	}
	taken, from, err := takeOwnership(ctx, cli, again.ID, again.Epoch, "node-b")
	if err != nil || taken.Owner != "node-b" || taken.Gen != 2 || from != "node-a" {
		t.Fatalf("takeover %+v from %q: %v", taken, from, err)
	}
	if _, err := cli.Delete(ctx, keys.Ingest("node-b")); err != nil {
		t.Fatal(err)
	}
	third, _, err := registerProducer(ctx, cli, "orders-app", "node-a")
	if err != nil || third.Epoch != 3 || third.Owner != "node-a" || third.Gen != 3 {
		t.Fatalf("registered after its owner's lease is gone: %+v %v, want node-a the owner at once", third, err)
	}
}

func TestConcurrentRegistrationsGiveDistinctEpochs(t *testing.T) {
	cli := startEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n = 8
	live(t, cli, "node")
	epochs := make(chan uint64, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rec, _, err := registerProducer(ctx, cli, "shared", "node")
			if err != nil {
				t.Error(err)
				return
			}
			epochs <- rec.Epoch
		}()
	}
	wg.Wait()
	close(epochs)
	seen := map[uint64]bool{}
	for e := range epochs {
		if seen[e] {
			t.Fatalf("epoch %d handed out twice", e)
		}
		seen[e] = true
	}
	if len(seen) != n {
		t.Fatalf("%d epochs for %d registrations", len(seen), n)
	}
}

func TestTopicsCreateListAndEnsure(t *testing.T) {
	cli := startEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	create := func(name string, partitions uint32, config *orderlogpb.TopicConfig) (*orderlogpb.Topic, error) {
		return CreateTopic(ctx, cli, &orderlogpb.CreateTopicRequest{Name: name, Partitions: partitions, Config: config})
	}
	if topic, err := create("orders", 0, nil); err != nil || topic.Partitions != partition.Default {
		t.Fatalf("create: %v %v", topic, err)
	}
	if _, err := create("orders", 0, nil); apierr.As(err).Code != apierr.TopicExists {
		t.Fatalf("second create: %v", err)
	}
	if _, err := create("no/slashes", 0, nil); apierr.As(err).Code != apierr.InvalidArgument {
		t.Fatalf("bad name: %v", err)
	}
	if _, err := create("huge", partition.Max+1, nil); apierr.As(err).Code != apierr.InvalidArgument {
		t.Fatalf("too many partitions: %v", err)
	}
	if topic, err := create("four", 4, nil); err != nil || topic.Partitions != 4 {
		t.Fatalf("create with 4 partitions: %v %v", topic, err)
	}
	topics := NewTopics(cli)
	for name, want := range map[string]uint32{"orders": partition.Default, "audit": partition.Default, "four": 4} {
		if n, err := topics.Ensure(ctx, name); err != nil || n != want {
			t.Fatalf("ensure %s: %d %v, want %d", name, n, err, want)
		}
		if n, err := NewTopics(cli).Partitions(ctx, name); err != nil || n != want {
			t.Fatalf("partitions of %s: %d %v, want %d", name, n, err, want)
		}
	}
	if _, err := topics.Partitions(ctx, "nowhere"); apierr.As(err).Code != apierr.UnknownTopic {
		t.Fatalf("unknown topic: %v", err)
	}
	list, err := ListTopics(ctx, cli)
	if err != nil || len(list) != 3 || list[0].Name != "audit" || list[2].Name != "orders" || list[0].Config.CleanupPolicy != "delete" ||
		list[1].Partitions != 4 || list[2].Partitions != partition.Default {
		t.Fatalf("topics %v %v", list, err)
	}
	compacted := &orderlogpb.TopicConfig{CleanupPolicy: "compact", DeleteRetentionMs: 1000, RetentionBytes: 1 << 30}
	if _, err := create("users", 0, compacted); err != nil {
		t.Fatal(err)
	}
	if list, err = ListTopics(ctx, cli); err != nil || len(list) != 4 || !proto.Equal(list[3].Config, compacted) {
		t.Fatalf("topics %v %v", list, err)
	}
	for _, bad := range []*orderlogpb.TopicConfig{{CleanupPolicy: "shred"}, {RetentionMs: -2}, {DeleteRetentionMs: -1}, {RetentionBytes: -1}} {
		if _, err := create("bad", 0, bad); apierr.As(err).Code != apierr.InvalidArgument {
			t.Fatalf("%v: %v", bad, err)
		}
	}
}

// A topic record written before topics had partitions has the default.
func TestTopicRecordWithoutPartitionsHasTheDefault(t *testing.T) {
	cli := startEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, keys.Topic("old"), `{"version":1,"name":"old","created":"2024-01-01T00:00:00Z"}`); err != nil {
		t.Fatal(err)
	}
	if n, err := NewTopics(cli).Ensure(ctx, "old"); err != nil || n != partition.Default {
		t.Fatalf("ensure: %d %v", n, err)
	}
	if list, err := ListTopics(ctx, cli); err != nil || len(list) != 1 || list[0].Partitions != partition.Default {
		t.Fatalf("list: %v %v", list, err)
	}
}

// TestStateLedgerFollowsTheOwnerEvenToALowerLedgerID: node-a recorded its
// ledger 50; node-b takes the producer over while its own ledger 40 is open
// (ids are global, and ledgers live long). The record must name ledger 40,
// or a rebuild would replay node-a's ledgers and miss node-b's.
// ledgersExist puts ledger records for ids: a state ledger is recorded
// only while its record exists and retention is not deleting it.
func ledgersExist(t *testing.T, cli *clientv3.Client, ids ...uint64) {
	t.Helper()
	for _, id := range ids {
		if _, err := cli.Put(context.Background(), keys.Ledger(id), "{}"); err != nil {
			t.Fatal(err)
		}
	}
}

func TestStateLedgerFollowsTheOwnerEvenToALowerLedgerID(t *testing.T) {
	cli := startEtcd(t)
	ledgersExist(t, cli, 40, 50, 60)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	live(t, cli, "node-a", "node-b")
	rec, _, err := registerProducer(ctx, cli, "orders-app", "node-a")
	if err != nil {
		t.Fatal(err)
	}
	if err := recordStateLedger(ctx, cli, rec.ID, "node-a", rec.Gen, 50); err != nil {
		t.Fatal(err)
	}
	again, _, err := registerProducer(ctx, cli, "orders-app", "node-b")
	if err != nil {
		t.Fatal(err)
	}
	taken, _, err := takeOwnership(ctx, cli, rec.ID, again.Epoch, "node-b")
	if err != nil {
		t.Fatal(err)
	}
	if err := recordStateLedger(ctx, cli, rec.ID, "node-b", taken.Gen, 40); err != nil {
		t.Fatal(err)
	}
	got, _, err := getProducer(ctx, cli, rec.ID)
	if err != nil || got.StateLedger != 40 || got.Owner != "node-b" {
		t.Fatalf("record %+v, %v: want state ledger 40 of node-b", got, err)
	}
	if err := recordStateLedger(ctx, cli, rec.ID, "node-a", rec.Gen, 60); err == nil {
		t.Fatal("a former owner recorded a state ledger")
	}
}

// TestAStateRecordOfAnEarlierOwnershipIsRefused: node-a owned the
// producer, handed it to node-b, and owns it again (node-b's lease is
// gone). A state record node-a's first session asked for lands late: it
// is refused, though node-a is the owner, because the record moved to a
// later ownership generation; else the record would name a ledger from
// before node-b's messages, and a rebuild would miss them.
func TestAStateRecordOfAnEarlierOwnershipIsRefused(t *testing.T) {
	cli := startEtcd(t)
	ledgersExist(t, cli, 3, 9)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	live(t, cli, "node-a", "node-b")
	first, _, err := registerProducer(ctx, cli, "orders-app", "node-a")
	if err != nil {
		t.Fatal(err)
	}
	again, _, err := registerProducer(ctx, cli, "orders-app", "node-b")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := takeOwnership(ctx, cli, first.ID, again.Epoch, "node-b"); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Delete(ctx, keys.Ingest("node-b")); err != nil {
		t.Fatal(err)
	}
	back, _, err := registerProducer(ctx, cli, "orders-app", "node-a")
	if err != nil || back.Owner != "node-a" {
		t.Fatalf("registered again: %+v %v", back, err)
	}
	if err := recordStateLedger(ctx, cli, first.ID, "node-a", first.Gen, 3); !errors.Is(err, errNotOwner) {
		t.Fatalf("a state record of node-a's first ownership: %v, want refused", err)
	}
	if err := recordStateLedger(ctx, cli, first.ID, "node-a", back.Gen, 9); err != nil {
		t.Fatal(err)
	}
}

// TestAStateLedgerBeingDeletedIsNeverRecorded: a producer's state is not
// recorded in a ledger retention marked for deletion, or one already gone
// (its rebuild would fail for good).
func TestAStateLedgerBeingDeletedIsNeverRecorded(t *testing.T) {
	cli := startEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	live(t, cli, "node-a")
	rec, _, err := registerProducer(ctx, cli, "orders-app", "node-a")
	if err != nil {
		t.Fatal(err)
	}
	ledgersExist(t, cli, 7, 8)
	if _, err := cli.Put(ctx, keys.LedgerDeleting(7), ""); err != nil {
		t.Fatal(err)
	}
	for _, id := range []uint64{7, 99} {
		if err := recordStateLedger(ctx, cli, rec.ID, "node-a", rec.Gen, id); err == nil {
			t.Fatalf("recorded ledger %d", id)
		}
	}
	if err := recordStateLedger(ctx, cli, rec.ID, "node-a", rec.Gen, 8); err != nil {
		t.Fatal(err)
	}
}
