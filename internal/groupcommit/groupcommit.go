// Package groupcommit is the form a consumer group's offset commit takes
// inside the log: a header of the last message of the producer frame that
// carried it (exactly-once from log to log, docs/consumers.md). The value
// is JSON with fixed field order, so the same commit is the same bytes.
package groupcommit

import (
	"encoding/json"
	"fmt"

	"orderlog/proto/orderlogpb"
)

// Header is the header key. Clients may not set it themselves.
const Header = "orderlog.group-commit"

type jsonOffset struct {
	Topic     string `json:"topic"`
	Partition uint32 `json:"partition"`
	Offset    uint64 `json:"offset"`
}

type jsonCommit struct {
	Group      string       `json:"group"`
	MemberID   string       `json:"member_id"`
	Generation uint64       `json:"generation"`
	Offsets    []jsonOffset `json:"offsets"`
}

// Encode is the header value of c.
func Encode(c *orderlogpb.GroupCommit) []byte {
	j := jsonCommit{Group: c.Group, MemberID: c.MemberId, Generation: c.Generation, Offsets: make([]jsonOffset, len(c.Offsets))}
	for i, o := range c.Offsets {
		j.Offsets[i] = jsonOffset{Topic: o.Topic, Partition: o.Partition, Offset: o.Offset}
	}
	b, _ := json.Marshal(j)
	return b
}

// Decode reads a header value written by Encode.
func Decode(value []byte) (*orderlogpb.GroupCommit, error) {
	var j jsonCommit
	if err := json.Unmarshal(value, &j); err != nil {
		return nil, fmt.Errorf("group commit header: %w", err)
	}
	c := &orderlogpb.GroupCommit{Group: j.Group, MemberId: j.MemberID, Generation: j.Generation}
	for _, o := range j.Offsets {
		c.Offsets = append(c.Offsets, &orderlogpb.PartitionOffset{Topic: o.Topic, Partition: o.Partition, Offset: o.Offset})
	}
	return c, nil
}

// Find returns the commit a stored message carries, if any.
func Find(m *orderlogpb.Message) (*orderlogpb.GroupCommit, bool, error) {
	for _, h := range m.GetHeaders() {
		if h.Key == Header {
			c, err := Decode(h.Value)
			return c, err == nil, err
		}
	}
	return nil, false, nil
}
