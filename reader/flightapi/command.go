package flightapi

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"strconv"

	"orderlog/internal/apierr"
	"orderlog/proto/orderlogpb"
)

// Command is a descriptor's command and a ticket, as JSON: an offset range
// [first, end) and a filter, the fields of the Query RPC. Unknown fields
// are refused.
type Command struct {
	// First and End bound the range; nil: the first offset a read may
	// start at, and the committed watermark C. A ticket has both.
	First *uint64 `json:"first,omitempty"`
	End   *uint64 `json:"end,omitempty"`
	// Topic and Key select messages; the key as text, or as KeyBase64 for
	// bytes that are not UTF-8 (as the JSON API renders keys).
	Topic     string `json:"topic,omitempty"`
	Key       string `json:"key,omitempty"`
	KeyBase64 string `json:"key_base64,omitempty"`
	// FromTimeUs (inclusive) and ToTimeUs (exclusive) bound the ingest
	// time, microseconds since the Unix epoch; 0: no bound.
	FromTimeUs int64 `json:"from_time_us,omitempty"`
	ToTimeUs   int64 `json:"to_time_us,omitempty"`
	// ProducerID selects one producer's messages; 0: any.
	ProducerID uint64 `json:"producer_id,omitempty"`
}

// span is a decided command: both bounds known, the key decoded.
type span struct {
	first, end uint64
	cmd        Command // its filter fields
	key        []byte
}

// decodeCommand parses a command or ticket.
func decodeCommand(b []byte) (Command, error) {
	var cmd Command
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cmd); err != nil {
		return Command{}, apierr.New(apierr.MalformedRequest, "the command is not a JSON object of first, end, topic, key, key_base64, from_time_us, to_time_us, producer_id: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return Command{}, apierr.New(apierr.MalformedRequest, "trailing data after the JSON command")
	}
	if cmd.Key != "" && cmd.KeyBase64 != "" {
		return Command{}, apierr.New(apierr.InvalidArgument, "give key or key_base64, not both")
	}
	return cmd, nil
}

// key returns the command's key, nil for none.
func (c Command) key() ([]byte, error) {
	switch {
	case c.KeyBase64 != "":
		key, err := base64.StdEncoding.DecodeString(c.KeyBase64)
		if err != nil {
			return nil, apierr.New(apierr.InvalidArgument, "key_base64 is not base64: %v", err)
		}
		return key, nil
	case c.Key != "":
		return []byte(c.Key), nil
	}
	return nil, nil
}

// decide fills the command's missing bounds from where reads start and C,
// and refuses a range outside them.
//
// A ticket (asTicket) whose end is beyond this node's C was planned by a
// node further ahead: UNAVAILABLE, which a client retries, not a client
// error.
func (c Command) decide(start, committed uint64, asTicket bool) (span, error) {
	key, err := c.key()
	if err != nil {
		return span{}, err
	}
	s := span{first: start, end: committed, cmd: c, key: key}
	if c.First != nil {
		s.first = *c.First
	}
	if c.End != nil {
		s.end = *c.End
	}
	switch {
	case s.end > committed && asTicket:
		return span{}, apierr.New(apierr.Unavailable, "the ticket ends at %d, beyond this node's committed watermark %d: retry, or ask the node that planned it", s.end, committed)
	case s.end > committed:
		return span{}, apierr.New(apierr.OffsetOutOfRange, "end %d is beyond the committed watermark %d", s.end, committed)
	case s.first > s.end:
		return span{}, apierr.New(apierr.OffsetOutOfRange, "first %d is above end %d", s.first, s.end)
	case s.first < start:
		return span{}, apierr.New(apierr.OffsetOutOfRange, "first %d is below the first readable offset %d: older messages were deleted by retention", s.first, start).
			With("log_start", strconv.FormatUint(start, 10))
	}
	return s, nil
}

// sub is the span's filter over [first, end).
func (s span) sub(first, end uint64) span {
	s.first, s.end = first, end
	return s
}

// ticket encodes the span as a ticket: a command with both bounds.
func (s span) ticket() []byte {
	cmd := s.cmd
	cmd.First, cmd.End = &s.first, &s.end
	b, _ := json.Marshal(cmd) // cannot fail: numbers and strings
	return b
}

// query is the Query request of one page of the span from `from` on.
func (s span) query(from uint64, limit uint32) *orderlogpb.QueryRequest {
	return &orderlogpb.QueryRequest{FromOffset: from, Limit: limit, Topic: s.cmd.Topic, Key: s.key,
		FromTimeUs: s.cmd.FromTimeUs, ToTimeUs: s.cmd.ToTimeUs, ProducerId: s.cmd.ProducerID}
}

// selectsAll reports whether the span's command has no filter.
func (s span) selectsAll() bool {
	c := s.cmd
	return c.Topic == "" && s.key == nil && c.FromTimeUs == 0 && c.ToTimeUs == 0 && c.ProducerID == 0
}
