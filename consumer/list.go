package consumer

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"orderlog/internal/apierr"
	"orderlog/proto/orderlogpb"
)

// GroupSummary is one group as a listing shows it: what DescribeGroup
// answers, summed up.
type GroupSummary struct {
	Group      string
	Generation uint64 // 0 before the first generation
	Members    int    // members of the current generation
	// Topics are the topics the group touches, sorted: those its
	// members subscribe to and those it has committed offsets in.
	Topics     []string
	Partitions int    // partitions with a lag (as DescribeGroup lists them)
	TotalLag   uint64 // the sum of their lags against C
}

// ListGroups summarises every group that has keys in etcd, sorted by
// name, with each partition's lag measured against this node's C as
// DescribeGroup measures it.
func (s *Service) ListGroups(ctx context.Context) ([]GroupSummary, error) {
	_, c := s.reader.Commits().Committed()
	return s.store.list(ctx, c, s.reader.ReadStart())
}

// groupKeys is what one group has in etcd.
type groupKeys struct {
	state   *State
	offsets map[TopicPartition]offsetRecord
}

// list reads every group's keys in one range read (one etcd revision, one
// round trip however many groups there are) and summarises each against C
// and floor (see describe).
func (s *Store) list(ctx context.Context, c, floor uint64) ([]GroupSummary, error) {
	resp, err := s.etcd.Get(ctx, groupsPrefix, clientv3.WithPrefix())
	if err != nil {
		return nil, apierr.New(apierr.Unavailable, "list consumer groups: %v", err)
	}
	groups := map[string]*groupKeys{}
	for _, kv := range resp.Kvs {
		group, ok := groupOfKey(string(kv.Key))
		if !ok {
			continue
		}
		g := groups[group]
		if g == nil {
			g = &groupKeys{offsets: map[TopicPartition]offsetRecord{}}
			groups[group] = g
		}
		if err := g.add(group, string(kv.Key), kv.Value); err != nil {
			return nil, err
		}
	}
	out := make([]GroupSummary, 0, len(groups))
	for group, g := range groups {
		out = append(out, summarize(describe(group, g.state, g.offsets, c, floor)))
	}
	slices.SortFunc(out, func(a, b GroupSummary) int { return strings.Compare(a.Group, b.Group) })
	return out, nil
}

// add takes one of group's keys: its state or an offset (member keys are
// counted through the state's generation, as DescribeGroup does).
func (g *groupKeys) add(group, key string, value []byte) error {
	switch {
	case key == stateKey(group):
		g.state = new(State)
		if err := json.Unmarshal(value, g.state); err != nil {
			return apierr.New(apierr.Internal, "group %q: state: %v", group, err)
		}
	case strings.HasPrefix(key, offsetsPrefix(group)):
		topic, p, ok := parseOffsetKey(group, key)
		var rec offsetRecord
		if !ok || json.Unmarshal(value, &rec) != nil {
			return apierr.New(apierr.Internal, "group %q: offset key %s is not one", group, key)
		}
		g.offsets[TopicPartition{topic, p}] = rec
	}
	return nil
}

// summarize sums up a group's description.
func summarize(d *orderlogpb.GroupDescription) GroupSummary {
	s := GroupSummary{Group: d.Group, Generation: d.Generation, Members: len(d.Members), Partitions: len(d.Partitions)}
	topics := map[string]bool{}
	for _, m := range d.Members {
		for _, t := range m.Topics {
			topics[t] = true
		}
	}
	for _, p := range d.Partitions {
		topics[p.Topic] = true
		s.TotalLag += p.Lag
	}
	s.Topics = slices.Sorted(maps.Keys(topics))
	return s
}
