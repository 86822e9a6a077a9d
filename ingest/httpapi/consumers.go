package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"time"

	"orderlog/internal/apierr"
	"orderlog/internal/partition"
	"orderlog/proto/orderlogpb"
)

// Consumers serves consumer groups (package consumer's Service, which the
// gRPC Consumer service calls too). The handlers here only translate
// /v1/consumers/... into these calls and their answers into JSON.
type Consumers interface {
	// Serve holds one membership for as long as ctx lasts: join joins;
	// recv returns the member's further requests and an error once the
	// member is gone; send carries assignments and batches, from one
	// goroutine at a time.
	Serve(ctx context.Context, join *orderlogpb.JoinGroup, recv func() (*orderlogpb.ConsumeRequest, error),
		send func(*orderlogpb.ConsumeResponse) error) error
	CommitOffsets(ctx context.Context, c *orderlogpb.GroupCommit) (*orderlogpb.CommitOffsetsResponse, error)
	DescribeGroup(ctx context.Context, req *orderlogpb.DescribeGroupRequest) (*orderlogpb.GroupDescription, error)
}

// errShuttingDown ends the open consumer streams when the server stops.
var errShuttingDown = apierr.New(apierr.Unavailable, "the node is shutting down: join again on another node")

// CloseStreams ends every open GET /v1/consumers/{group}/stream with an
// UNAVAILABLE error line (its member leaves), so that http.Server.Shutdown
// need not wait for them: register it with RegisterOnShutdown.
func (h *Handler) CloseStreams() { h.closeStreams(errShuttingDown) }

// describeGroup answers GET /v1/consumers/{group}.
func (h *Handler) describeGroup(w http.ResponseWriter, r *http.Request) {
	desc, err := h.consumers.DescribeGroup(r.Context(), &orderlogpb.DescribeGroupRequest{Group: r.PathValue("group")})
	if err != nil {
		apierr.WriteHTTP(w, err)
		return
	}
	writeJSON(w, encodeGroupDescription(desc))
}

// commitOffsets answers POST /v1/consumers/{group}/offsets with {} once
// the offsets are stored.
func (h *Handler) commitOffsets(w http.ResponseWriter, r *http.Request) {
	body, err := h.readBody(r)
	if err != nil {
		apierr.WriteHTTP(w, err)
		return
	}
	commit, err := DecodeGroupCommit(r.PathValue("group"), body)
	if err != nil {
		apierr.WriteHTTP(w, err)
		return
	}
	if _, err := h.consumers.CommitOffsets(r.Context(), commit); err != nil {
		apierr.WriteHTTP(w, err)
		return
	}
	writeJSON(w, struct{}{})
}

// consumeStream answers GET /v1/consumers/{group}/stream: one membership
// for as long as the request lasts, as NDJSON lines (ndjsonStream). The
// member commits through POST .../offsets, so it sends nothing on the
// stream: the membership ends when the client goes away, the node shuts
// down (CloseStreams), or the service ends it.
func (h *Handler) consumeStream(w http.ResponseWriter, r *http.Request) {
	join, err := DecodeJoin(r.PathValue("group"), r.URL.Query())
	if err != nil {
		apierr.WriteHTTP(w, err)
		return
	}
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	stopOnShutdown := context.AfterFunc(h.streams, func() { cancel(context.Cause(h.streams)) })
	defer stopOnShutdown()
	out := &ndjsonStream{w: w, control: http.NewResponseController(w), writeTimeout: sessionTimeout(join)}
	recv := func() (*orderlogpb.ConsumeRequest, error) {
		<-ctx.Done()
		return nil, context.Cause(ctx)
	}
	err = h.consumers.Serve(ctx, join, recv, out.send)
	if r.Context().Err() != nil {
		return // the client went away: nobody to tell
	}
	out.finish(err)
}

// sessionTimeout is the join's session timeout; 0 is the service's
// default, 10 s (consumer.DefaultSessionTimeout, which this package cannot
// import: consumer imports it).
func sessionTimeout(join *orderlogpb.JoinGroup) time.Duration {
	if join.SessionTimeoutMs == 0 {
		return 10 * time.Second
	}
	return time.Duration(join.SessionTimeoutMs) * time.Millisecond
}

// ndjsonStream writes a membership's answers as lines of JSON, flushed one
// by one. Nothing is written before the first line, so an error before it
// (a bad join, an unknown topic, etcd unreachable) is an ordinary JSON
// error with its status; an error after it is a last line {"error": ...}.
type ndjsonStream struct {
	w       http.ResponseWriter
	control *http.ResponseController
	// writeTimeout bounds one line's write: a client that reads nothing
	// for a session timeout while lines wait is taken as gone, and its
	// member leaves rather than hold its partitions.
	writeTimeout time.Duration

	mu struct {
		sync.Mutex
		started bool // the 200 and at least one line were sent
	}
}

func (s *ndjsonStream) send(resp *orderlogpb.ConsumeResponse) error {
	line, ok := encodeConsumeResponse(resp)
	if !ok {
		return nil // commit results: this stream carries no commits
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.mu.started {
		s.w.Header().Set("Content-Type", "application/x-ndjson")
		s.w.Header().Set("Cache-Control", "no-store")
		s.w.WriteHeader(http.StatusOK)
		s.mu.started = true
	}
	return s.writeLineLocked(line)
}

// finish ends the stream with err: an error answer if no line was sent,
// else a last error line (none for a stream that ended without one).
func (s *ndjsonStream) finish(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case err == nil:
	case !s.mu.started:
		apierr.WriteHTTP(s.w, err)
	default:
		_ = s.writeLineLocked(jsonStreamLine{Error: encodeStreamError(err)})
	}
}

func (s *ndjsonStream) writeLineLocked(line jsonStreamLine) error {
	if err := s.control.SetWriteDeadline(time.Now().Add(s.writeTimeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	enc := json.NewEncoder(s.w) // one Write per line
	enc.SetEscapeHTML(false)
	if err := enc.Encode(line); err != nil {
		return err
	}
	return s.control.Flush()
}

// DecodeJoin parses GET /v1/consumers/{group}/stream?topic=&topic=
// &client_name=&start=&session_timeout_ms=. No topic (or an empty one)
// means DefaultTopic. The group name, client name and start rule are the
// service's to check (gRPC and HTTP alike).
func DecodeJoin(group string, query map[string][]string) (*orderlogpb.JoinGroup, error) {
	first := func(name string) string {
		if values := query[name]; len(values) > 0 {
			return values[0]
		}
		return ""
	}
	join := &orderlogpb.JoinGroup{Group: group, ClientName: first("client_name"), Start: first("start")}
	for _, topic := range query["topic"] {
		if topic == "" {
			topic = DefaultTopic
		}
		if err := ValidateTopicName(topic); err != nil {
			return nil, err
		}
		join.Topics = append(join.Topics, topic)
	}
	if len(join.Topics) == 0 {
		join.Topics = []string{DefaultTopic}
	}
	if text := first("session_timeout_ms"); text != "" {
		ms, err := strconv.ParseUint(text, 10, 32)
		if err != nil {
			return nil, apierr.New(apierr.InvalidArgument, "session_timeout_ms must be milliseconds, got %q", text)
		}
		join.SessionTimeoutMs = uint32(ms)
	}
	return join, nil
}

// jsonPartitionOffset is a partition and an offset: where a partition
// starts in an assignment, and what a commit stores (the next offset to
// consume: the last processed message's offset + 1).
type jsonPartitionOffset struct {
	Topic     string `json:"topic"`
	Partition uint32 `json:"partition"`
	Offset    uint64 `json:"offset"`
}

// DecodeGroupCommit parses a POST /v1/consumers/{group}/offsets body:
// {"member_id", "generation", "offsets": [{"topic", "partition", "offset"}]},
// member_id and generation as the member's assignment line gave them. An
// empty topic means DefaultTopic; a partition may appear once.
func DecodeGroupCommit(group string, body []byte) (*orderlogpb.GroupCommit, error) {
	var in struct {
		MemberID   string                `json:"member_id"`
		Generation uint64                `json:"generation"`
		Offsets    []jsonPartitionOffset `json:"offsets"`
	}
	if err := strictUnmarshal(body, &in); err != nil {
		return nil, err
	}
	switch {
	case in.MemberID == "":
		return nil, apierr.New(apierr.InvalidArgument, "member_id is required (from the stream's assignment)")
	case in.Generation == 0:
		return nil, apierr.New(apierr.InvalidArgument, "generation is required (from the stream's assignment)")
	case len(in.Offsets) == 0:
		return nil, apierr.New(apierr.InvalidArgument, "offsets: give at least one")
	}
	commit := &orderlogpb.GroupCommit{Group: group, MemberId: in.MemberID, Generation: in.Generation}
	seen := make(map[jsonPartitionOffset]bool, len(in.Offsets))
	for _, o := range in.Offsets {
		if o.Topic == "" {
			o.Topic = DefaultTopic
		}
		if err := ValidateTopicName(o.Topic); err != nil {
			return nil, err
		}
		if o.Partition >= partition.Max {
			return nil, apierr.New(apierr.InvalidArgument, "partition %d: topics have at most %d", o.Partition, partition.Max)
		}
		tp := jsonPartitionOffset{Topic: o.Topic, Partition: o.Partition}
		if seen[tp] {
			return nil, apierr.New(apierr.InvalidArgument, "partition %d of topic %q appears twice", o.Partition, o.Topic)
		}
		seen[tp] = true
		commit.Offsets = append(commit.Offsets, &orderlogpb.PartitionOffset{Topic: o.Topic, Partition: o.Partition, Offset: o.Offset})
	}
	return commit, nil
}

// jsonStreamLine is one line of a consumer stream: exactly one field set.
type jsonStreamLine struct {
	Assignment *jsonAssignment   `json:"assignment,omitempty"`
	Batch      *jsonConsumeBatch `json:"batch,omitempty"`
	Error      *jsonStreamError  `json:"error,omitempty"`
}

// jsonAssignment is the member's partitions in one generation and where
// each starts; batches after it belong to it.
type jsonAssignment struct {
	MemberID   string                `json:"member_id"`
	Generation uint64                `json:"generation"`
	Partitions []jsonPartitionOffset `json:"partitions"`
}

// jsonConsumeBatch is messages of the member's partitions in global
// offset order, each as GET /v1/messages renders it plus its partition.
type jsonConsumeBatch struct {
	Generation uint64             `json:"generation"`
	Messages   []jsonGroupMessage `json:"messages"`
	Skipped    []jsonSkipped      `json:"skipped"`
	NextOffset uint64             `json:"next_offset"`
	Committed  uint64             `json:"committed"`
}

type jsonGroupMessage struct {
	jsonStoredMessage
	Partition uint32 `json:"partition"`
}

// jsonStreamError is an error after the stream started: the fields of
// every HTTP error body.
type jsonStreamError struct {
	Code      apierr.Code       `json:"code"`
	Class     apierr.Class      `json:"class"`
	Message   string            `json:"message"`
	Retryable bool              `json:"retryable"`
	Details   map[string]string `json:"details,omitempty"`
}

func encodeStreamError(err error) *jsonStreamError {
	e := apierr.As(err)
	return &jsonStreamError{Code: e.Code, Class: e.Class(), Message: e.Message, Retryable: e.Class() == apierr.ClassRetry, Details: e.Details}
}

// encodeConsumeResponse is the line for an assignment or a batch (false
// for anything else).
func encodeConsumeResponse(resp *orderlogpb.ConsumeResponse) (jsonStreamLine, bool) {
	if a := resp.GetAssignment(); a != nil {
		out := &jsonAssignment{MemberID: a.MemberId, Generation: a.Generation, Partitions: []jsonPartitionOffset{}}
		for _, p := range a.Partitions {
			out.Partitions = append(out.Partitions, jsonPartitionOffset{Topic: p.Topic, Partition: p.Partition, Offset: p.Offset})
		}
		return jsonStreamLine{Assignment: out}, true
	}
	if b := resp.GetBatch(); b != nil {
		out := &jsonConsumeBatch{Generation: b.Generation, Messages: make([]jsonGroupMessage, len(b.Messages)),
			Skipped: []jsonSkipped{}, NextOffset: b.NextOffset, Committed: b.Committed}
		for i, m := range b.Messages {
			out.Messages[i] = jsonGroupMessage{jsonStoredMessage: encodeStored(m)}
			if i < len(b.Partitions) {
				out.Messages[i].Partition = b.Partitions[i]
			}
		}
		for _, hole := range b.Skipped {
			out.Skipped = append(out.Skipped, jsonSkipped{First: hole.First, End: hole.End, Reason: hole.Reason})
		}
		return jsonStreamLine{Batch: out}, true
	}
	return jsonStreamLine{}, false
}

// jsonGroupDescription is GET /v1/consumers/{group}: the generation, its
// members, and every partition's committed offset and lag against
// committed (C, the committed watermark).
type jsonGroupDescription struct {
	Group      string             `json:"group"`
	Generation uint64             `json:"generation"`
	Committed  uint64             `json:"committed"`
	Members    []jsonGroupMember  `json:"members"`
	Partitions []jsonPartitionLag `json:"partitions"`
}

type jsonGroupMember struct {
	MemberID   string               `json:"member_id"`
	ClientName string               `json:"client_name"`
	Topics     []string             `json:"topics"`
	Node       string               `json:"node"`
	Partitions []jsonTopicPartition `json:"partitions"` // their offsets are in the description's partitions
}

type jsonTopicPartition struct {
	Topic     string `json:"topic"`
	Partition uint32 `json:"partition"`
}

// jsonPartitionLag: committed is absent before the partition's first
// commit; member_id is absent while no member holds the partition.
type jsonPartitionLag struct {
	Topic     string  `json:"topic"`
	Partition uint32  `json:"partition"`
	Committed *uint64 `json:"committed,omitempty"`
	EndOffset uint64  `json:"end_offset"`
	Lag       uint64  `json:"lag"`
	MemberID  string  `json:"member_id,omitempty"`
}

func encodeGroupDescription(d *orderlogpb.GroupDescription) jsonGroupDescription {
	out := jsonGroupDescription{Group: d.Group, Generation: d.Generation, Committed: d.Committed,
		Members: []jsonGroupMember{}, Partitions: []jsonPartitionLag{}}
	for _, m := range d.Members {
		member := jsonGroupMember{MemberID: m.MemberId, ClientName: m.ClientName, Topics: m.Topics, Node: m.Node,
			Partitions: []jsonTopicPartition{}}
		if member.Topics == nil {
			member.Topics = []string{}
		}
		for _, p := range m.Partitions {
			member.Partitions = append(member.Partitions, jsonTopicPartition{Topic: p.Topic, Partition: p.Partition})
		}
		out.Members = append(out.Members, member)
	}
	for _, p := range d.Partitions {
		out.Partitions = append(out.Partitions, jsonPartitionLag{Topic: p.Topic, Partition: p.Partition,
			Committed: p.Committed, EndOffset: p.EndOffset, Lag: p.Lag, MemberID: p.MemberId})
	}
	return out
}
