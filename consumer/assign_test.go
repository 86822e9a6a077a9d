package consumer

import (
	"fmt"
	"testing"

	"orderlog/internal/apierr"
	"orderlog/proto/orderlogpb"
)

// TestAssignGivesEveryPartitionToExactlyOneSubscriber: with any number of
// members and overlapping subscriptions, each partition of each topic has
// one owner, subscribed to its topic, and owners differ by at most one
// partition per topic.
func TestAssignGivesEveryPartitionToExactlyOneSubscriber(t *testing.T) {
	counts := map[string]uint32{"a": 16, "b": 3, "c": 1}
	for n := 1; n <= 7; n++ {
		var members []Member
		for i := range n {
			topics := []string{"a"}
			if i%2 == 0 {
				topics = []string{"a", "b"}
			}
			if i == n-1 {
				topics = append(topics, "c")
			}
			members = append(members, Member{ID: fmt.Sprintf("m%02d", i), Topics: topics})
		}
		got := Assign(members, counts)
		owners := map[TopicPartition]string{}
		perTopic := map[string]map[string]int{}
		for id, parts := range got {
			for _, tp := range parts {
				if prev, dup := owners[tp]; dup {
					t.Fatalf("%d members: %v assigned to %s and %s", n, tp, prev, id)
				}
				owners[tp] = id
				if perTopic[tp.Topic] == nil {
					perTopic[tp.Topic] = map[string]int{}
				}
				perTopic[tp.Topic][id]++
			}
		}
		for topic, count := range counts {
			for p := range count {
				id, ok := owners[TopicPartition{topic, p}]
				if !ok {
					t.Fatalf("%d members: %s/%d has no owner", n, topic, p)
				}
				var m Member
				for _, mm := range members {
					if mm.ID == id {
						m = mm
					}
				}
				subscribed := false
				for _, tt := range m.Topics {
					subscribed = subscribed || tt == topic
				}
				if !subscribed {
					t.Fatalf("%d members: %s/%d went to %s, not subscribed", n, topic, p, id)
				}
			}
			least, most := 1<<30, 0
			subscribers := 0
			for _, m := range members {
				for _, tt := range m.Topics {
					if tt == topic {
						subscribers++
						c := perTopic[topic][m.ID]
						least, most = min(least, c), max(most, c)
					}
				}
			}
			if int(count) >= subscribers && most-least > 1 {
				t.Fatalf("%d members: topic %s spread %d..%d", n, topic, least, most)
			}
		}
	}
}

func TestNextStateBumpsTheGeneration(t *testing.T) {
	members := []Member{{ID: "a", Topics: []string{"t"}}}
	s1 := nextState(nil, members, map[string]uint32{"t": 2})
	s2 := nextState(s1, append(members, Member{ID: "b", Topics: []string{"t"}}), map[string]uint32{"t": 2})
	if s1.Generation != 1 || s2.Generation != 2 {
		t.Fatalf("generations %d, %d", s1.Generation, s2.Generation)
	}
	if !s1.sameMembers(members) || s2.sameMembers(members) {
		t.Fatal("sameMembers is wrong")
	}
	if s2.owner(TopicPartition{"t", 0}) != "a" || s2.owner(TopicPartition{"t", 1}) != "b" {
		t.Fatalf("assignment %v", s2.Assignment)
	}
}

func TestCheckCommitRefusesWhatNoMemberOwns(t *testing.T) {
	st := nextState(nil, []Member{{ID: "a", Topics: []string{"t"}}, {ID: "b", Topics: []string{"t"}}}, map[string]uint32{"t": 4})
	commit := func(member string, gen uint64, parts ...uint32) *orderlogpb.GroupCommit {
		c := &orderlogpb.GroupCommit{Group: "g", MemberId: member, Generation: gen}
		for _, p := range parts {
			c.Offsets = append(c.Offsets, &orderlogpb.PartitionOffset{Topic: "t", Partition: p, Offset: 9})
		}
		return c
	}
	for name, tc := range map[string]struct {
		c    *orderlogpb.GroupCommit
		want apierr.Code
	}{
		"own partitions":        {commit("a", 1, 0, 2), ""},
		"older generation":      {commit("a", 0, 0), apierr.StaleGeneration},
		"newer generation":      {commit("a", 2, 0), apierr.StaleGeneration},
		"another's partition":   {commit("a", 1, 1), apierr.NotAssigned},
		"no such partition":     {commit("a", 1, 9), apierr.NotAssigned},
		"no member":             {commit("", 1, 9), apierr.InvalidArgument},
		"no offsets":            {commit("a", 1), apierr.InvalidArgument},
		"a partition twice":     {commit("a", 1, 0, 0), apierr.InvalidArgument},
		"before any generation": {commit("a", 1, 0), ""},
	} {
		state := st
		if name == "before any generation" {
			state, tc.want = nil, apierr.StaleGeneration
		}
		err := checkCommit(state, tc.c)
		if got := apierr.As(err); (got == nil) != (tc.want == "") || got != nil && got.Code != tc.want {
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
	}
}
