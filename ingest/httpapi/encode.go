package httpapi

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"time"
	"unicode/utf8"

	"orderlog/proto/orderlogpb"
)

// jsonAck is one message's answer: success is always true (a refusal is
// an error answer instead), partition its virtual partition in its topic.
type jsonAck struct {
	Success   bool    `json:"success"`
	Partition uint32  `json:"partition"`
	Offset    *uint64 `json:"offset"` // null for a duplicate older than the dedup window
	Duplicate bool    `json:"duplicate"`
}

func encodeAcks(acks []*orderlogpb.Ack, batch bool) any {
	out := make([]jsonAck, len(acks))
	for i, ack := range acks {
		out[i] = jsonAck{Success: true, Partition: ack.Partition, Duplicate: ack.Duplicate}
		if !ack.DuplicateWithoutOffset {
			offset := ack.Offset
			out[i].Offset = &offset
		}
	}
	if batch || len(out) != 1 {
		return out
	}
	return out[0]
}

type jsonPartition struct {
	Partition uint32 `json:"partition"`
	EndOffset uint64 `json:"end_offset"`
}

type jsonPartitions struct {
	Topic      string          `json:"topic"`
	Partitions []jsonPartition `json:"partitions"`
	LogStart   uint64          `json:"log_start"`
	Committed  uint64          `json:"committed"`
}

func encodePartitions(resp *orderlogpb.ListPartitionsResponse) jsonPartitions {
	out := jsonPartitions{Topic: resp.Topic, Partitions: make([]jsonPartition, len(resp.Partitions)),
		LogStart: resp.LogStart, Committed: resp.Committed}
	for i, p := range resp.Partitions {
		out.Partitions[i] = jsonPartition{Partition: p.Partition, EndOffset: p.EndOffset}
	}
	return out
}

type jsonStoredMessage struct {
	Offset        uint64          `json:"offset"`
	Topic         string          `json:"topic"`
	Key           string          `json:"key,omitempty"`
	KeyBase64     string          `json:"key_base64,omitempty"`
	Payload       json.RawMessage `json:"payload,omitempty"`
	PayloadBase64 *string         `json:"payload_base64,omitempty"`
	Headers       []jsonHeader    `json:"headers,omitempty"`
	ProducerID    uint64          `json:"producer_id,omitempty"`
	ProducerSeq   *uint64         `json:"producer_seq,omitempty"` // absent without a producer session
	IngestTime    string          `json:"ingest_time"`
	ClientTimeUS  int64           `json:"client_time_us,omitempty"`
	MessageID     string          `json:"message_id,omitempty"`
	MessageID64   string          `json:"message_id_base64,omitempty"`
	SchemaID      uint32          `json:"schema_id,omitempty"`
}

type jsonSkipped struct {
	First  uint64 `json:"first"`
	End    uint64 `json:"end"`
	Reason string `json:"reason,omitempty"` // "compacted" below the log start; none for a hole
}

type jsonReadResponse struct {
	Messages   []jsonStoredMessage `json:"messages"`
	NextOffset uint64              `json:"next_offset"`
	Committed  uint64              `json:"committed"`
	Skipped    []jsonSkipped       `json:"skipped"`
}

func encodeRead(resp *orderlogpb.ReadResponse) jsonReadResponse {
	out := jsonReadResponse{Messages: []jsonStoredMessage{}, Skipped: []jsonSkipped{},
		NextOffset: resp.NextOffset, Committed: resp.Committed}
	for _, stored := range resp.Messages {
		out.Messages = append(out.Messages, encodeStored(stored))
	}
	for _, hole := range resp.Skipped {
		out.Skipped = append(out.Skipped, jsonSkipped{First: hole.First, End: hole.End, Reason: hole.Reason})
	}
	return out
}

// encodeStored renders a value that is compact JSON as `payload` (so JSON
// in comes back as JSON out) and anything else as `payload_base64`; keys,
// header values and message ids that are not UTF-8 go as base64 too. A
// reader gets the stored bytes exactly either way.
func encodeStored(stored *orderlogpb.StoredMessage) jsonStoredMessage {
	msg := stored.GetMessage()
	out := jsonStoredMessage{
		Offset:       stored.Offset,
		Topic:        msg.GetTopic(),
		ProducerID:   stored.ProducerId,
		IngestTime:   time.UnixMicro(stored.IngestTimeUs).UTC().Format(time.RFC3339Nano),
		ClientTimeUS: msg.GetClientTimeUs(),
		SchemaID:     msg.GetSchemaId(),
	}
	if id := msg.GetMessageId(); utf8.Valid(id) {
		out.MessageID = string(id)
	} else {
		out.MessageID64 = base64.StdEncoding.EncodeToString(id)
	}
	if stored.ProducerId != 0 {
		seq := stored.ProducerSeq
		out.ProducerSeq = &seq
	}
	if key := msg.GetKey(); utf8.Valid(key) {
		out.Key = string(key)
	} else {
		out.KeyBase64 = base64.StdEncoding.EncodeToString(key)
	}
	if value := msg.GetValue(); isCompactJSON(value) {
		out.Payload = json.RawMessage(value)
	} else {
		encoded := base64.StdEncoding.EncodeToString(value)
		out.PayloadBase64 = &encoded
	}
	for _, h := range msg.GetHeaders() {
		header := jsonHeader{Key: h.Key}
		if utf8.Valid(h.Value) {
			text := string(h.Value)
			header.Value = &text
		} else {
			encoded := base64.StdEncoding.EncodeToString(h.Value)
			header.ValueBase64 = &encoded
		}
		out.Headers = append(out.Headers, header)
	}
	return out
}

// isCompactJSON reports whether value goes out as the `payload` JSON text
// byte for byte: valid UTF-8 and valid JSON already in compact form (the
// encoder compacts what it embeds).
func isCompactJSON(value []byte) bool {
	if len(value) == 0 || !utf8.Valid(value) || !json.Valid(value) {
		return false
	}
	var compact bytes.Buffer
	return json.Compact(&compact, value) == nil && bytes.Equal(compact.Bytes(), value)
}
