package consumer

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"orderlog/internal/apierr"
	"orderlog/proto/orderlogpb"
)

// Store reads and writes groups in etcd.
type Store struct {
	etcd *clientv3.Client
	// counts is a topic's partition count (UNKNOWN_TOPIC if it has none).
	counts func(ctx context.Context, topic string) (uint32, error)
}

// NewStore returns a Store; counts gives a topic's partition count.
func NewStore(etcd *clientv3.Client, counts func(ctx context.Context, topic string) (uint32, error)) *Store {
	return &Store{etcd: etcd, counts: counts}
}

// offsetRecord is the value of an offset key.
type offsetRecord struct {
	Offset     uint64 `json:"offset"`
	Generation uint64 `json:"generation"`
	Member     string `json:"member"`
	TimeMicros int64  `json:"time_us"`
	// FromLog: written after a producer frame that carried the commit was
	// logged (exactly-once loops), not by a member's own commit.
	FromLog bool `json:"from_log,omitempty"`
}

// snapshot is a group's members and state at one etcd revision.
type snapshot struct {
	members  []Member // sorted by ID
	state    *State   // nil before the first generation
	stateRev int64    // the state key's mod revision (0: absent)
	revision int64
}

// join puts the member's key under a new lease of ttl.
func (s *Store) join(ctx context.Context, group string, m Member, ttl time.Duration) (clientv3.LeaseID, error) {
	lease, err := s.etcd.Grant(ctx, int64((ttl+time.Second-1)/time.Second))
	if err != nil {
		return 0, apierr.New(apierr.Unavailable, "group %q: grant a member lease: %v", group, err)
	}
	value, _ := json.Marshal(m)
	if _, err := s.etcd.Put(ctx, memberKey(group, m.ID), string(value), clientv3.WithLease(lease.ID)); err != nil {
		return 0, apierr.New(apierr.Unavailable, "group %q: register member: %v", group, err)
	}
	return lease.ID, nil
}

// leave revokes a member's lease, which deletes its key: the group
// rebalances at once instead of after the session timeout.
func (s *Store) leave(life context.Context, lease clientv3.LeaseID) {
	ctx, cancel := context.WithTimeout(life, 3*time.Second)
	defer cancel()
	_, _ = s.etcd.Revoke(ctx, lease) // if it fails, the lease expires
}

// load reads a group's members and state in one transaction.
func (s *Store) load(ctx context.Context, group string) (snapshot, error) {
	resp, err := s.etcd.Txn(ctx).Then(
		clientv3.OpGet(membersPrefix(group), clientv3.WithPrefix()),
		clientv3.OpGet(stateKey(group)),
	).Commit()
	if err != nil {
		return snapshot{}, apierr.New(apierr.Unavailable, "group %q: read members: %v", group, err)
	}
	snap := snapshot{revision: resp.Header.Revision}
	for _, kv := range resp.Responses[0].GetResponseRange().Kvs {
		var m Member
		if err := json.Unmarshal(kv.Value, &m); err != nil {
			return snapshot{}, apierr.New(apierr.Internal, "group %q: member key %s: %v", group, kv.Key, err)
		}
		snap.members = append(snap.members, m)
	}
	slices.SortFunc(snap.members, func(a, b Member) int { return strings.Compare(a.ID, b.ID) })
	if kvs := resp.Responses[1].GetResponseRange().Kvs; len(kvs) == 1 {
		snap.state = new(State)
		if err := json.Unmarshal(kvs[0].Value, snap.state); err != nil {
			return snapshot{}, apierr.New(apierr.Internal, "group %q: state: %v", group, err)
		}
		snap.stateRev = kvs[0].ModRevision
	}
	return snap, nil
}

// reconcile makes the group's state match its members: a new generation
// if they changed. Any number of nodes may call it at once; the compare on
// the state's revision lets one write each generation.
func (s *Store) reconcile(ctx context.Context, group string) (*State, int64, error) {
	for {
		snap, err := s.load(ctx, group)
		if err != nil {
			return nil, 0, err
		}
		if snap.state != nil && snap.state.sameMembers(snap.members) {
			return snap.state, snap.revision, nil
		}
		counts := map[string]uint32{}
		for _, m := range snap.members {
			for _, t := range m.Topics {
				if _, ok := counts[t]; ok {
					continue
				}
				if counts[t], err = s.counts(ctx, t); err != nil {
					return nil, 0, err
				}
			}
		}
		next := nextState(snap.state, snap.members, counts)
		value, _ := json.Marshal(next)
		resp, err := s.etcd.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(stateKey(group)), "=", snap.stateRev)).
			Then(clientv3.OpPut(stateKey(group), string(value))).
			Commit()
		if err != nil {
			return nil, 0, apierr.New(apierr.Unavailable, "group %q: write generation %d: %v", group, next.Generation, err)
		}
		if resp.Succeeded {
			return next, resp.Header.Revision, nil
		}
		// another node wrote a generation meanwhile: look again
	}
}

// offsets reads a group's committed offsets.
func (s *Store) offsets(ctx context.Context, group string) (map[TopicPartition]offsetRecord, error) {
	resp, err := s.etcd.Get(ctx, offsetsPrefix(group), clientv3.WithPrefix())
	if err != nil {
		return nil, apierr.New(apierr.Unavailable, "group %q: read offsets: %v", group, err)
	}
	out := make(map[TopicPartition]offsetRecord, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		topic, p, ok := parseOffsetKey(group, string(kv.Key))
		var rec offsetRecord
		if !ok || json.Unmarshal(kv.Value, &rec) != nil {
			return nil, apierr.New(apierr.Internal, "group %q: offset key %s is not one", group, kv.Key)
		}
		out[TopicPartition{topic, p}] = rec
	}
	return out, nil
}

// checkCommit is whether a commit may be stored under state: it must come
// from state's generation and name only partitions state assigns to its
// member.
func checkCommit(state *State, c *orderlogpb.GroupCommit) error {
	switch {
	case c.MemberId == "":
		return apierr.New(apierr.InvalidArgument, "group %q: a commit names its member", c.Group)
	case len(c.Offsets) == 0:
		return apierr.New(apierr.InvalidArgument, "group %q: a commit without offsets", c.Group)
	}
	named := make(map[TopicPartition]bool, len(c.Offsets))
	for _, o := range c.Offsets {
		tp := TopicPartition{o.Topic, o.Partition}
		if named[tp] {
			return apierr.New(apierr.InvalidArgument, "group %q: partition %d of topic %q is named twice in one commit", c.Group, o.Partition, o.Topic)
		}
		named[tp] = true
	}
	if state == nil || c.Generation != state.Generation {
		at := uint64(0)
		if state != nil {
			at = state.Generation
		}
		return apierr.New(apierr.StaleGeneration, "group %q: a commit from generation %d; the group is at generation %d: "+
			"the partitions were reassigned, join again", c.Group, c.Generation, at)
	}
	for _, o := range c.Offsets {
		tp := TopicPartition{o.Topic, o.Partition}
		if owner := state.owner(tp); owner != c.MemberId {
			return apierr.New(apierr.NotAssigned, "group %q generation %d: partition %d of topic %q is assigned to %q, not to %q",
				c.Group, c.Generation, o.Partition, o.Topic, owner, c.MemberId)
		}
	}
	return nil
}

// commit stores a member's offsets in one transaction that holds only if
// the group is still at the commit's generation: a zombie's commit (a
// member replaced in a rebalance) changes nothing.
func (s *Store) commit(ctx context.Context, c *orderlogpb.GroupCommit) error {
	if err := ValidateGroupName(c.Group); err != nil {
		return err
	}
	resp, err := s.etcd.Get(ctx, stateKey(c.Group))
	if err != nil {
		return apierr.New(apierr.Unavailable, "group %q: read state: %v", c.Group, err)
	}
	var state *State
	var stateRev int64
	if len(resp.Kvs) == 1 {
		state = new(State)
		if err := json.Unmarshal(resp.Kvs[0].Value, state); err != nil {
			return apierr.New(apierr.Internal, "group %q: state: %v", c.Group, err)
		}
		stateRev = resp.Kvs[0].ModRevision
	}
	if err := checkCommit(state, c); err != nil {
		return err
	}
	now := time.Now().UnixMicro()
	ops := make([]clientv3.Op, 0, len(c.Offsets))
	for _, o := range c.Offsets {
		value, _ := json.Marshal(offsetRecord{Offset: o.Offset, Generation: c.Generation, Member: c.MemberId, TimeMicros: now})
		ops = append(ops, clientv3.OpPut(offsetKey(c.Group, o.Topic, o.Partition), string(value)))
	}
	txn, err := s.etcd.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(stateKey(c.Group)), "=", stateRev)).
		Then(ops...).
		Commit()
	if err != nil {
		return apierr.New(apierr.Unavailable, "group %q: store offsets: %v", c.Group, err)
	}
	if !txn.Succeeded {
		return apierr.New(apierr.StaleGeneration, "group %q: generation %d ended while its commit was stored; nothing was stored", c.Group, c.Generation)
	}
	return nil
}

// commitFromLog stores the offsets a logged producer frame carried, for a
// group's description and its members' starting points. The log holds the
// commit already (exactly-once loops read it back from there), so this
// only moves offsets forward and skips a commit whose generation is over.
func (s *Store) commitFromLog(ctx context.Context, c *orderlogpb.GroupCommit) error {
	for attempt := 0; attempt < 5; attempt++ {
		resp, err := s.etcd.Get(ctx, stateKey(c.Group))
		if err != nil {
			return err
		}
		if len(resp.Kvs) != 1 {
			return nil
		}
		var state State
		if err := json.Unmarshal(resp.Kvs[0].Value, &state); err != nil {
			return err
		}
		if checkCommit(&state, c) != nil {
			return nil // a later generation decides
		}
		cmps := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(stateKey(c.Group)), "=", resp.Kvs[0].ModRevision)}
		var ops []clientv3.Op
		now := time.Now().UnixMicro()
		for _, o := range c.Offsets {
			key := offsetKey(c.Group, o.Topic, o.Partition)
			got, err := s.etcd.Get(ctx, key)
			if err != nil {
				return err
			}
			var rev int64
			if len(got.Kvs) == 1 {
				var rec offsetRecord
				if json.Unmarshal(got.Kvs[0].Value, &rec) == nil && rec.Offset >= o.Offset {
					continue
				}
				rev = got.Kvs[0].ModRevision
			}
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(key), "=", rev))
			value, _ := json.Marshal(offsetRecord{Offset: o.Offset, Generation: c.Generation, Member: c.MemberId, TimeMicros: now, FromLog: true})
			ops = append(ops, clientv3.OpPut(key, string(value)))
		}
		if len(ops) == 0 {
			return nil
		}
		txn, err := s.etcd.Txn(ctx).If(cmps...).Then(ops...).Commit()
		if err != nil {
			return err
		}
		if txn.Succeeded {
			return nil
		}
	}
	return fmt.Errorf("group %q: offsets kept changing", c.Group)
}

// pinStart stores offset as tp's committed offset if it has none yet (a
// create-only transaction) and returns the partition's offset either way:
// "latest" means the watermark when the group first took the partition,
// not at every rebalance after, which would skip what came in between.
func (s *Store) pinStart(ctx context.Context, group string, tp TopicPartition, offset uint64) (uint64, error) {
	key := offsetKey(group, tp.Topic, tp.Partition)
	value, _ := json.Marshal(offsetRecord{Offset: offset, TimeMicros: time.Now().UnixMicro()})
	resp, err := s.etcd.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(value))).Else(clientv3.OpGet(key)).Commit()
	if err != nil {
		return 0, apierr.New(apierr.Unavailable, "group %q: pin the start of %s/%d: %v", group, tp.Topic, tp.Partition, err)
	}
	if resp.Succeeded {
		return offset, nil
	}
	var rec offsetRecord
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) == 1 && json.Unmarshal(kvs[0].Value, &rec) == nil {
		return rec.Offset, nil
	}
	return offset, nil
}
