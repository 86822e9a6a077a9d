package consumer

import (
	"context"
	"slices"

	clientv3 "go.etcd.io/etcd/client/v3"

	"orderlog/internal/apierr"
	"orderlog/proto/orderlogpb"
)

// DescribeGroup is a group's members, their partitions, and each
// partition's committed offset and lag.
func (s *Service) DescribeGroup(ctx context.Context, req *orderlogpb.DescribeGroupRequest) (*orderlogpb.GroupDescription, error) {
	if err := ValidateGroupName(req.Group); err != nil {
		return nil, err
	}
	snap, err := s.store.load(ctx, req.Group)
	if err != nil {
		return nil, err
	}
	offsets, err := s.store.offsets(ctx, req.Group)
	if err != nil {
		return nil, err
	}
	if snap.state == nil && len(snap.members) == 0 && len(offsets) == 0 {
		return nil, apierr.New(apierr.UnknownGroup, "consumer group %q has no members and no offsets", req.Group)
	}
	_, c := s.reader.Commits().Committed()
	d := describe(req.Group, snap.state, offsets, c, s.reader.ReadStart())
	if s.describeAccess != nil {
		if err := s.describeAccess(ctx, DescriptionTopics(d)); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// DescriptionTopics is every topic a description names, sorted, once each.
func DescriptionTopics(d *orderlogpb.GroupDescription) []string {
	var topics []string
	for _, p := range d.Partitions {
		topics = append(topics, p.Topic)
	}
	for _, m := range d.Members {
		topics = append(topics, m.Topics...)
	}
	slices.Sort(topics)
	return slices.Compact(topics)
}

// describe builds a description from a state (nil: none yet), committed
// offsets, C and the first readable offset (a partition without a commit
// lags by everything readable). Partitions are those of the state's
// topics, and any other partition with a committed offset.
func describe(group string, state *State, offsets map[TopicPartition]offsetRecord, c, floor uint64) *orderlogpb.GroupDescription {
	d := &orderlogpb.GroupDescription{Group: group, Committed: c}
	seen := map[TopicPartition]bool{}
	owners := map[TopicPartition]string{}
	if state != nil {
		d.Generation = state.Generation
		for _, m := range state.Members {
			gm := &orderlogpb.GroupMember{MemberId: m.ID, ClientName: m.ClientName, Topics: m.Topics, Node: m.Node}
			for _, tp := range state.Assignment[m.ID] {
				owners[tp] = m.ID
				po := &orderlogpb.PartitionOffset{Topic: tp.Topic, Partition: tp.Partition}
				if rec, ok := offsets[tp]; ok {
					po.Offset = rec.Offset
				}
				gm.Partitions = append(gm.Partitions, po)
			}
			d.Members = append(d.Members, gm)
		}
		for topic, n := range state.Partitions {
			for p := range n {
				seen[TopicPartition{topic, p}] = true
			}
		}
	}
	for tp := range offsets {
		seen[tp] = true
	}
	for tp := range seen {
		lag := &orderlogpb.PartitionLag{Topic: tp.Topic, Partition: tp.Partition, EndOffset: c, MemberId: owners[tp], Lag: c - min(floor, c)}
		if rec, ok := offsets[tp]; ok {
			lag.Committed = &rec.Offset
			lag.Lag = c - min(rec.Offset, c)
		}
		d.Partitions = append(d.Partitions, lag)
	}
	slices.SortFunc(d.Partitions, func(a, b *orderlogpb.PartitionLag) int {
		if a.Topic != b.Topic {
			if a.Topic < b.Topic {
				return -1
			}
			return 1
		}
		return int(a.Partition) - int(b.Partition)
	})
	return d
}

// groups lists the groups that have keys in etcd.
func (s *Store) groups(ctx context.Context) ([]string, error) {
	resp, err := s.etcd.Get(ctx, groupsPrefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, err
	}
	var out []string
	for _, kv := range resp.Kvs {
		if g, ok := groupOfKey(string(kv.Key)); ok && (len(out) == 0 || out[len(out)-1] != g) {
			out = append(out, g)
		}
	}
	return out, nil
}
