package consumer

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
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

// GroupPage is one page of the group listing.
type GroupPage struct {
	Groups []GroupSummary
	// Next, when not "", is the last group of a full page: pass it as
	// after for the next page.
	Next string
	// Undecodable counts the groups of this page left out because one of
	// their keys (state or an offset) does not decode.
	Undecodable int
}

// ListGroups summarises up to limit groups that have keys in etcd, those
// after the group named after ("" from the first), in the order of their
// keys (by path-escaped name), with each partition's lag measured against
// this node's C as DescribeGroup measures it.
func (s *Service) ListGroups(ctx context.Context, after string, limit int) (GroupPage, error) {
	_, c := s.reader.Commits().Committed()
	return s.store.list(ctx, after, limit, c, s.reader.ReadStart())
}

// listBatch is how many keys one etcd read of a listing returns at most
// (a variable so that tests can make groups span reads).
var listBatch int64 = 500

// groupKeys is what one group has in etcd.
type groupKeys struct {
	name    string
	state   *State
	offsets map[TopicPartition]offsetRecord
	err     error // the first key that did not decode
}

// list reads the keys of up to limit groups after the group named after,
// in range reads of at most listBatch keys at one etcd revision, and
// summarises each against C and floor (see describe). It reads one key
// beyond the page's last group to know whether there is a next page.
func (s *Store) list(ctx context.Context, after string, limit int, c, floor uint64) (GroupPage, error) {
	from := groupsPrefix
	if after != "" {
		from = groupsPrefix + url.PathEscape(after) + "0" // '0' follows '/': past every key of after
	}
	end := clientv3.GetPrefixRangeEnd(groupsPrefix)
	var groups []*groupKeys
	var rev int64
	unnamed, lastUnnamed := 0, "" // keys whose group name does not unescape, counted once a name
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(listBatch)}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := s.etcd.Get(ctx, from, opts...)
		if err != nil {
			return GroupPage{}, apierr.New(apierr.Unavailable, "list consumer groups: %v", err)
		}
		rev = resp.Header.Revision
		for _, kv := range resp.Kvs {
			group, ok := groupOfKey(string(kv.Key))
			if !ok {
				if escaped, _, _ := strings.Cut(strings.TrimPrefix(string(kv.Key), groupsPrefix), "/"); escaped != lastUnnamed {
					unnamed, lastUnnamed = unnamed+1, escaped
				}
				continue
			}
			if len(groups) == 0 || groups[len(groups)-1].name != group {
				if len(groups) == limit { // a key of the next page's first group
					return page(groups, true, unnamed, c, floor), nil
				}
				groups = append(groups, &groupKeys{name: group, offsets: map[TopicPartition]offsetRecord{}})
			}
			groups[len(groups)-1].add(string(kv.Key), kv.Value)
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return page(groups, false, unnamed, c, floor), nil
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// page summarises groups; more says a group follows the last of them,
// unnamed counts the groups whose name did not decode.
func page(groups []*groupKeys, more bool, unnamed int, c, floor uint64) GroupPage {
	p := GroupPage{Groups: make([]GroupSummary, 0, len(groups)), Undecodable: unnamed}
	for _, g := range groups {
		if g.err != nil {
			p.Undecodable++
			continue
		}
		p.Groups = append(p.Groups, summarize(describe(g.name, g.state, g.offsets, c, floor)))
	}
	if more && len(groups) > 0 {
		p.Next = groups[len(groups)-1].name
	}
	return p
}

// add takes one of the group's keys: its state or an offset (member keys
// are counted through the state's generation, as DescribeGroup does). A
// key that does not decode is kept in err, and the group is left out.
func (g *groupKeys) add(key string, value []byte) {
	if g.err != nil {
		return
	}
	switch {
	case key == stateKey(g.name):
		g.state = new(State)
		if err := json.Unmarshal(value, g.state); err != nil {
			g.err = fmt.Errorf("group %q: state: %w", g.name, err)
		}
	case strings.HasPrefix(key, offsetsPrefix(g.name)):
		topic, p, ok := parseOffsetKey(g.name, key)
		var rec offsetRecord
		if !ok || json.Unmarshal(value, &rec) != nil {
			g.err = fmt.Errorf("group %q: offset key %s is not one", g.name, key)
			return
		}
		g.offsets[TopicPartition{topic, p}] = rec
	}
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
