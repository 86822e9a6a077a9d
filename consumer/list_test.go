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
	if got, err := store.list(ctx, "", 100, 10, 0); err != nil || len(got.Groups) != 0 || got.Next != "" {
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
	listed, err := store.list(ctx, "", 100, c, floor)
	if err != nil {
		t.Fatal(err)
	}
	got := listed.Groups
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

// TestListPagesByGroupAndSkipsUndecodableGroups: the listing comes a page
// of groups at a time, each page resuming after the last group of the one
// before, in reads of a few keys that split groups between them; a group
// whose state or offset key does not decode, or whose name does not
// unescape, is left out and counted, and the rest are listed.
func TestListPagesByGroupAndSkipsUndecodableGroups(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	defer func(n int64) { listBatch = n }(listBatch)
	listBatch = 3 // a group of 2 members and a state spans reads
	cli := etcdtest.Client(t)
	store := NewStore(cli, func(context.Context, string) (uint32, error) { return 2, nil })
	names := []string{"a", "a-b", "b", "c d", "e"}
	for _, group := range names {
		for _, member := range []string{"m1", "m2"} {
			if _, err := store.join(ctx, group, Member{ID: member, Topics: []string{"orders"}}, time.Minute); err != nil {
				t.Fatal(err)
			}
		}
		if _, _, err := store.reconcile(ctx, group); err != nil {
			t.Fatal(err)
		}
	}
	for key, value := range map[string]string{
		stateKey("bad-state"):                       "not json",
		offsetsPrefix("bad-offset") + "orders/zero": `{"offset":1}`,
		groupsPrefix + "%zz/state":                  "{}",
	} {
		if _, err := cli.Put(ctx, key, value); err != nil {
			t.Fatal(err)
		}
	}
	var listed []string
	undecodable, pages := 0, 0
	for after := ""; ; pages++ {
		p, err := store.list(ctx, after, 2, 10, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range p.Groups {
			listed = append(listed, g.Group)
			if g.Generation == 0 || g.Members != 2 {
				t.Errorf("group %s: %+v, want its generation and 2 members", g.Group, g)
			}
		}
		undecodable += p.Undecodable
		if p.Next == "" {
			break
		}
		after = p.Next
	}
	// Key order: "a-b/" before "a/" ('-' < '/'), "bad-…" after "b/",
	// "c%20d" after them; "%zz" first of all.
	if want := []string{"a-b", "a", "b", "c d", "e"}; !reflect.DeepEqual(listed, want) {
		t.Errorf("listed %q, want %q", listed, want)
	}
	if undecodable != 3 {
		t.Errorf("%d groups counted undecodable, want 3 (bad-state, bad-offset, %%zz)", undecodable)
	}
	if pages < 3 {
		t.Errorf("%d pages of at most 2 groups for 7 groups", pages+1)
	}
}
