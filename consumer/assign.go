package consumer

import (
	"slices"
	"strings"
)

// Member is one member of a group, as its member key records it.
type Member struct {
	ID         string   `json:"id"`
	ClientName string   `json:"client_name,omitempty"`
	Topics     []string `json:"topics"` // sorted, distinct
	Node       string   `json:"node,omitempty"`
}

// TopicPartition names one virtual partition of a topic.
type TopicPartition struct {
	Topic     string `json:"topic"`
	Partition uint32 `json:"partition"`
}

// State is a group's generation: its members and the assignment of their
// topics' partitions to them. Every change of the members makes a new
// generation; a State is never changed in place.
type State struct {
	Generation uint64   `json:"generation"`
	Members    []Member `json:"members"` // sorted by ID
	// Assignment maps a member ID to its partitions, sorted by topic and
	// partition. A member with nothing to consume (more members than
	// partitions) has no entry.
	Assignment map[string][]TopicPartition `json:"assignment"`
	// Partitions is each topic's partition count when the state was made.
	Partitions map[string]uint32 `json:"partitions"`
}

// member returns the member with this ID.
func (s *State) member(id string) (Member, bool) {
	i, ok := slices.BinarySearchFunc(s.Members, id, func(m Member, id string) int { return strings.Compare(m.ID, id) })
	if !ok {
		return Member{}, false
	}
	return s.Members[i], true
}

// owner is the member a partition is assigned to ("" if none).
func (s *State) owner(tp TopicPartition) string {
	for id, parts := range s.Assignment {
		if slices.Contains(parts, tp) {
			return id
		}
	}
	return ""
}

// sameMembers reports whether the state was made for exactly these members
// (same IDs, same topics).
func (s *State) sameMembers(members []Member) bool {
	return slices.EqualFunc(s.Members, members, func(a, b Member) bool {
		return a.ID == b.ID && slices.Equal(a.Topics, b.Topics)
	})
}

// Assign spreads each topic's partitions over the members subscribed to it,
// round robin in member ID order: partition p of a topic with k
// subscribers goes to the (p mod k)-th of them. Members must be sorted by
// ID; counts gives each subscribed topic's partition count. The result is
// a function of its arguments only, so every node computes the same.
func Assign(members []Member, counts map[string]uint32) map[string][]TopicPartition {
	subscribers := map[string][]string{}
	for _, m := range members {
		for _, t := range m.Topics {
			subscribers[t] = append(subscribers[t], m.ID)
		}
	}
	topics := make([]string, 0, len(subscribers))
	for t := range subscribers {
		topics = append(topics, t)
	}
	slices.Sort(topics)
	out := map[string][]TopicPartition{}
	for _, t := range topics {
		ids := subscribers[t]
		for p := range counts[t] {
			id := ids[int(p)%len(ids)]
			out[id] = append(out[id], TopicPartition{Topic: t, Partition: p})
		}
	}
	return out
}

// nextState is the generation after prev (nil: none yet) for these members.
func nextState(prev *State, members []Member, counts map[string]uint32) *State {
	gen := uint64(1)
	if prev != nil {
		gen = prev.Generation + 1
	}
	return &State{Generation: gen, Members: members, Assignment: Assign(members, counts), Partitions: counts}
}
