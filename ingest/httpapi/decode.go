package httpapi

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"unicode/utf8"

	"orderlog/internal/apierr"
	"orderlog/internal/partition"
	"orderlog/proto/orderlogpb"
)

// jsonMessage is one message as POSTed. The value is either `payload` (any
// JSON value, stored as its compact JSON text: whitespace between tokens is
// not kept, so that a read gives back the stored bytes as JSON) or
// `payload_base64` (raw bytes).
type jsonMessage struct {
	Topic         string          `json:"topic"` // "": DefaultTopic
	Key           string          `json:"key"`
	Payload       json.RawMessage `json:"payload"`
	PayloadBase64 *string         `json:"payload_base64"`
	Headers       []jsonHeader    `json:"headers"`
	ClientTimeUS  int64           `json:"client_time_us"`
	MessageID     string          `json:"message_id"`
	SchemaID      uint32          `json:"schema_id"`
	Metadata      *jsonMetadata   `json:"metadata"`
}

// jsonMetadata is the specification's message metadata: the schema the
// payload is written in, as a version of the subject named like the topic
// (resolved to its global id on produce) or as the id itself.
type jsonMetadata struct {
	SchemaVersion int    `json:"schema_version"`
	SchemaID      uint32 `json:"schema_id"`
}

// jsonHeader is a header as POSTed and as read: its value as text, or as
// `value_base64` for bytes that are not UTF-8.
type jsonHeader struct {
	Key         string  `json:"key"`
	Value       *string `json:"value,omitempty"`
	ValueBase64 *string `json:"value_base64,omitempty"`
}

func (h jsonHeader) toProto() (*orderlogpb.Header, error) {
	switch {
	case h.Value != nil && h.ValueBase64 != nil:
		return nil, apierr.New(apierr.InvalidArgument, "header %q: give value or value_base64, not both", h.Key)
	case h.ValueBase64 != nil:
		value, err := base64.StdEncoding.DecodeString(*h.ValueBase64)
		if err != nil {
			return nil, apierr.New(apierr.InvalidArgument, "header %q: value_base64 is not base64: %v", h.Key, err)
		}
		return &orderlogpb.Header{Key: h.Key, Value: value}, nil
	case h.Value != nil:
		return &orderlogpb.Header{Key: h.Key, Value: []byte(*h.Value)}, nil
	}
	return &orderlogpb.Header{Key: h.Key}, nil
}

// ProduceCall is a decoded POST /v1/messages.
type ProduceCall struct {
	Request *orderlogpb.ProduceRequest
	// Batch is true when the body was a JSON array: the answer is an array.
	Batch bool
	// SchemaVersions holds each message's metadata.schema_version (0:
	// none), nil when no message names one; the handler resolves them to
	// schema ids before producing.
	SchemaVersions []int
}

// DecodeProduce turns a POST /v1/messages body and headers into a request.
func DecodeProduce(header http.Header, body []byte, limits Limits) (*ProduceCall, error) {
	if len(body) > limits.MaxBodyBytes {
		return nil, apierr.New(apierr.BatchTooLarge, "body of %d bytes exceeds %d", len(body), limits.MaxBodyBytes)
	}
	trimmed := bytes.TrimLeft(body, " \t\r\n") // JSON's whitespace, no other
	call := &ProduceCall{Request: &orderlogpb.ProduceRequest{}, Batch: len(trimmed) > 0 && trimmed[0] == '['}
	var messages []jsonMessage
	if call.Batch {
		if err := strictUnmarshal(trimmed, &messages); err != nil {
			return nil, err
		}
	} else {
		var one jsonMessage
		if err := strictUnmarshal(trimmed, &one); err != nil {
			return nil, err
		}
		messages = []jsonMessage{one}
	}
	if len(messages) == 0 {
		return nil, apierr.New(apierr.InvalidArgument, "a batch needs at least one message")
	}
	if len(messages) > limits.MaxBatch {
		return nil, apierr.New(apierr.BatchTooLarge, "%d messages exceed the batch limit %d", len(messages), limits.MaxBatch)
	}
	for i := range messages {
		msg, err := messages[i].toProto(limits)
		if err != nil {
			return nil, withIndex(err, i, call.Batch)
		}
		call.Request.Messages = append(call.Request.Messages, msg)
		if v := messages[i].schemaVersion(); v != 0 {
			if call.SchemaVersions == nil {
				call.SchemaVersions = make([]int, len(messages))
			}
			call.SchemaVersions[i] = v
		}
	}
	if err := decodeProducerHeaders(header, call); err != nil {
		return nil, err
	}
	return call, nil
}

func (m *jsonMessage) toProto(limits Limits) (*orderlogpb.Message, error) {
	value, err := m.value()
	if err != nil {
		return nil, err
	}
	if len(value) > limits.MaxMessageBytes {
		return nil, apierr.New(apierr.MessageTooLarge, "payload of %d bytes exceeds %d", len(value), limits.MaxMessageBytes)
	}
	topic := m.Topic
	if topic == "" {
		topic = DefaultTopic
	}
	if err := ValidateTopicName(topic); err != nil {
		return nil, err
	}
	schemaID, err := m.schemaID()
	if err != nil {
		return nil, err
	}
	msg := &orderlogpb.Message{Topic: topic, Value: value, ClientTimeUs: m.ClientTimeUS, SchemaId: schemaID}
	if m.Key != "" {
		msg.Key = []byte(m.Key)
	}
	if m.MessageID != "" {
		msg.MessageId = []byte(m.MessageID)
	}
	for _, h := range m.Headers {
		header, err := h.toProto()
		if err != nil {
			return nil, err
		}
		msg.Headers = append(msg.Headers, header)
	}
	return msg, nil
}

// schemaID is the message's schema_id, given at the top level or in
// metadata (the same one if both).
func (m *jsonMessage) schemaID() (uint32, error) {
	if m.Metadata != nil && m.Metadata.SchemaVersion < 0 {
		return 0, apierr.New(apierr.InvalidArgument, "metadata.schema_version %d: versions start at 1", m.Metadata.SchemaVersion)
	}
	if m.Metadata == nil || m.Metadata.SchemaID == 0 {
		return m.SchemaID, nil
	}
	if m.SchemaID != 0 && m.SchemaID != m.Metadata.SchemaID {
		return 0, apierr.New(apierr.InvalidArgument, "schema_id %d and metadata.schema_id %d disagree", m.SchemaID, m.Metadata.SchemaID)
	}
	return m.Metadata.SchemaID, nil
}

func (m *jsonMessage) schemaVersion() int {
	if m.Metadata == nil {
		return 0
	}
	return m.Metadata.SchemaVersion
}

func (m *jsonMessage) value() ([]byte, error) {
	hasJSON := len(m.Payload) > 0
	switch {
	case hasJSON && m.PayloadBase64 != nil:
		return nil, apierr.New(apierr.InvalidArgument, "give payload or payload_base64, not both")
	case m.PayloadBase64 != nil:
		value, err := base64.StdEncoding.DecodeString(*m.PayloadBase64)
		if err != nil {
			return nil, apierr.New(apierr.InvalidArgument, "payload_base64 is not base64: %v", err)
		}
		return value, nil
	case hasJSON:
		var compact bytes.Buffer
		if err := json.Compact(&compact, m.Payload); err != nil { // cannot fail: the decoder checked it
			return nil, apierr.New(apierr.MalformedRequest, "payload: %v", err)
		}
		return compact.Bytes(), nil
	}
	return nil, apierr.New(apierr.InvalidArgument, "payload or payload_base64 is required")
}

func decodeProducerHeaders(header http.Header, call *ProduceCall) error {
	idempotencyKey := ""
	if values := header.Values("Idempotency-Key"); len(values) > 0 {
		var err error
		if idempotencyKey, err = ParseIdempotencyKey(values[0]); err != nil {
			return err
		}
	}
	if idempotencyKey != "" && len(call.Request.Messages) != 1 {
		return apierr.New(apierr.InvalidArgument, "Idempotency-Key names one message; send batches with Producer-* headers")
	}
	call.Request.IdempotencyKey = idempotencyKey
	id, epoch, seq := header.Get("Producer-Id"), header.Get("Producer-Epoch"), header.Get("Producer-Seq")
	if id == "" && epoch == "" && seq == "" {
		return nil
	}
	if idempotencyKey != "" {
		return apierr.New(apierr.InvalidArgument, "use Producer-* headers or Idempotency-Key, not both")
	}
	values := make([]uint64, 3)
	for i, field := range []struct{ name, text string }{{"Producer-Id", id}, {"Producer-Epoch", epoch}, {"Producer-Seq", seq}} {
		v, err := strconv.ParseUint(field.text, 10, 64)
		if err != nil {
			return apierr.New(apierr.InvalidArgument, "%s must be an unsigned integer, got %q", field.name, field.text)
		}
		values[i] = v
	}
	if values[0] == 0 {
		return apierr.New(apierr.InvalidArgument, "Producer-Id must not be 0")
	}
	call.Request.ProducerId, call.Request.Epoch, call.Request.FirstSeq = values[0], values[1], values[2]
	return nil
}

// strictUnmarshal decodes JSON, refusing unknown fields, trailing data and
// bytes that are not UTF-8 (RFC 8259 §8.1; encoding/json would replace them
// with U+FFFD, and the log would hold what the client never sent: binary
// values go in payload_base64).
func strictUnmarshal(body []byte, v any) error {
	if !utf8.Valid(body) {
		return apierr.New(apierr.MalformedRequest, "body is not UTF-8; send binary values base64-encoded (payload_base64, value_base64)")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return apierr.New(apierr.MalformedRequest, "body is not valid JSON for this endpoint: %v", err)
	}
	// Only JSON whitespace may follow. (More reports false at a stray '}'
	// or ']', which let `{...}}` through.)
	if _, err := dec.Token(); err != io.EOF {
		return apierr.New(apierr.MalformedRequest, "trailing data after the JSON body")
	}
	return nil
}

func withIndex(err error, index int, batch bool) error {
	apiErr := apierr.As(err)
	if !batch {
		return apiErr
	}
	return apiErr.With("index", strconv.Itoa(index))
}

// ReadCall is a decoded GET /v1/messages.
type ReadCall struct {
	Request *orderlogpb.QueryRequest
}

// DecodeAck parses the ack option of POST /v1/messages (?ack=): "leader",
// "replicated" (or its older name "quorum"), or none for the node's mode.
func DecodeAck(text string) (orderlogpb.AckMode, error) {
	switch text {
	case "":
		return orderlogpb.AckMode_ACK_MODE_DEFAULT, nil
	case "leader":
		return orderlogpb.AckMode_ACK_MODE_LEADER, nil
	case "replicated", "quorum":
		return orderlogpb.AckMode_ACK_MODE_REPLICATED, nil
	}
	return 0, apierr.New(apierr.InvalidArgument, "ack %q: want leader or replicated", text)
}

// DecodeInitProducer parses a POST /v1/producers body.
func DecodeInitProducer(body []byte) (*orderlogpb.InitProducerRequest, error) {
	var in struct {
		Name string `json:"name"`
	}
	if err := strictUnmarshal(body, &in); err != nil {
		return nil, err
	}
	if err := ValidateProducerName(in.Name); err != nil {
		return nil, err
	}
	return &orderlogpb.InitProducerRequest{Name: in.Name}, nil
}

// DecodeCreateTopic parses a POST /v1/topics body: {name, partitions} and
// the cleanup configuration.
func DecodeCreateTopic(body []byte) (*orderlogpb.CreateTopicRequest, error) {
	var in struct {
		Name              string `json:"name"`
		Partitions        uint32 `json:"partitions"`
		CleanupPolicy     string `json:"cleanup_policy"`
		RetentionMs       int64  `json:"retention_ms"`
		DeleteRetentionMs int64  `json:"delete_retention_ms"`
		RetentionBytes    int64  `json:"retention_bytes"`
	}
	if err := strictUnmarshal(body, &in); err != nil {
		return nil, err
	}
	if err := ValidateTopicName(in.Name); err != nil {
		return nil, err
	}
	if in.Partitions > partition.Max {
		return nil, apierr.New(apierr.InvalidArgument, "partitions %d: want 1 to %d (0 or none: %d)", in.Partitions, partition.Max, partition.Default)
	}
	return &orderlogpb.CreateTopicRequest{Name: in.Name, Partitions: in.Partitions, Config: &orderlogpb.TopicConfig{
		CleanupPolicy: in.CleanupPolicy, RetentionMs: in.RetentionMs, DeleteRetentionMs: in.DeleteRetentionMs,
		RetentionBytes: in.RetentionBytes}}, nil
}

// DecodeRead parses GET /v1/messages?offset=&limit=&topic=&key=&partition=
// &producer=&from_time_us=&to_time_us=.
// With partition the topic defaults to DefaultTopic (the service does that:
// an empty topic otherwise means every topic).
func DecodeRead(query map[string][]string, limits Limits) (*ReadCall, error) {
	get := func(name string) string {
		if values := query[name]; len(values) > 0 {
			return values[0]
		}
		return ""
	}
	req := &orderlogpb.QueryRequest{Topic: get("topic"), Limit: 100}
	if key := get("key"); key != "" {
		req.Key = []byte(key)
	}
	if text := get("offset"); text != "" {
		offset, err := strconv.ParseUint(text, 10, 64)
		if err != nil {
			return nil, apierr.New(apierr.InvalidArgument, "offset must be an unsigned integer, got %q", text)
		}
		req.FromOffset = offset
	}
	if text := get("limit"); text != "" {
		limit, err := strconv.ParseUint(text, 10, 32)
		if err != nil || limit == 0 {
			return nil, apierr.New(apierr.InvalidArgument, "limit must be a positive integer, got %q", text)
		}
		if limit > uint64(limits.MaxReadLimit) {
			return nil, apierr.New(apierr.LimitTooLarge, "limit %d exceeds the maximum %d", limit, limits.MaxReadLimit)
		}
		req.Limit = uint32(limit)
	}
	for _, n := range []struct {
		name string
		into *int64
	}{{"from_time_us", &req.FromTimeUs}, {"to_time_us", &req.ToTimeUs}} {
		if text := get(n.name); text != "" {
			t, err := strconv.ParseInt(text, 10, 64)
			if err != nil || t < 0 {
				return nil, apierr.New(apierr.InvalidArgument, "%s must be microseconds since the Unix epoch, got %q", n.name, text)
			}
			*n.into = t
		}
	}
	if text := get("producer"); text != "" {
		id, err := strconv.ParseUint(text, 10, 64)
		if err != nil || id == 0 {
			return nil, apierr.New(apierr.InvalidArgument, "producer must be a producer id (a positive integer), got %q", text)
		}
		req.ProducerId = id
	}
	if text := get("partition"); text != "" {
		p, err := strconv.ParseUint(text, 10, 32)
		if err != nil || p >= partition.Max {
			return nil, apierr.New(apierr.InvalidArgument, "partition must be an integer from 0 to %d, got %q", partition.Max-1, text)
		}
		p32 := uint32(p)
		req.Partition = &p32
	}
	if req.Topic != "" {
		if err := ValidateTopicName(req.Topic); err != nil {
			return nil, err
		}
	}
	return &ReadCall{Request: req}, nil
}
