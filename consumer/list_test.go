package consumer

import (
	"context"
	"reflect"
	"testing"
	"time"

	"orderlog/internal/apierr"
	"orderlog/internal/etcdtest"
	"orderlog/proto/orderlogpb"
)

// TestListSummarizesEveryGroupAsDescribeDoes: the listing has one entry
// per group with keys in etcd (names with escaped characters included),
// sorted by name, each with the generation, members, topics and total lag
// that its description gives, measured against the same C.
func TestListSummarizesEveryGroupAsDescribeDoes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	counts := map[string]uint32{"orders": 2, "audit": 1}
	store := NewStore(etcdtest.Client(t), func(_ context.Context, topic string) (uint32, error) {
		if n, ok := counts[topic]; ok {
			return n, nil
		}
		return 0, apierr.New(apierr.UnknownTopic, "no topic %q", topic)
	})
	if got, err := store.list(ctx, 10, 0); err != nil || len(got) != 0 {
		t.Fatalf("no groups: %v %v, want an empty list", got, err)
	}
	join := func(group, member string, topics ...string) *State {
		t.Helper()
		if _, err := store.join(ctx, group, Member{ID: member, Topics: topics}, time.Minute); err != nil {
			t.Fatal(err)
		}
		state, _, err := store.reconcile(ctx, group)
		if err != nil {
			t.Fatal(err)
		}
		return state
	}
	billing := join("billing", "m1", "orders")
	billing = join("billing", "m2", "audit", "orders")
	if err := store.commit(ctx, &orderlogpb.GroupCommit{Group: "billing", MemberId: billing.Members[0].ID, Generation: billing.Generation,
		Offsets: []*orderlogpb.PartitionOffset{{Topic: billing.Assignment[billing.Members[0].ID][0].Topic,
			Partition: billing.Assignment[billing.Members[0].ID][0].Partition, Offset: 4}}}); err != nil {
		t.Fatal(err)
	}
	join("a/b c", "x", "audit")

	const c, floor = 10, 2
	got, err := store.list(ctx, c, floor)
	if err != nil {
		t.Fatal(err)
	}
	var want []GroupSummary
	for _, group := range []string{"a/b c", "billing"} {
		snap, err := store.load(ctx, group)
		if err != nil {
			t.Fatal(err)
		}
		offsets, err := store.offsets(ctx, group)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, summarize(describe(group, snap.state, offsets, c, floor)))
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("list:\n%+v\nwant, as described:\n%+v", got, want)
	}
	// billing: orders/0..1 and audit/0; one partition committed at 4
	// (lag 6), the two others lag from the floor (8 each).
	b := got[1]
	if b.Group != "billing" || b.Generation != 2 || b.Members != 2 || b.Partitions != 3 || b.TotalLag != 6+8+8 ||
		!reflect.DeepEqual(b.Topics, []string{"audit", "orders"}) {
		t.Errorf("billing: %+v", b)
	}
}
