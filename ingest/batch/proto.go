package batch

import "orderlog/proto/orderlogpb"

// FromProto converts an API message to a batch record (no copies: the
// record aliases the message's slices).
func FromProto(m *orderlogpb.Message) Record {
	rec := Record{Topic: m.Topic, Key: m.Key, Value: m.Value, ClientTimeMicros: m.ClientTimeUs, MessageID: m.MessageId, SchemaID: m.SchemaId}
	if len(m.Headers) > 0 {
		rec.Headers = make([]MessageHeader, len(m.Headers))
		for i, h := range m.Headers {
			rec.Headers[i] = MessageHeader{Key: h.Key, Value: h.Value}
		}
	}
	return rec
}

// ToProto converts a decoded record back to an API message.
func ToProto(rec *Record) *orderlogpb.Message {
	m := &orderlogpb.Message{Topic: rec.Topic, Key: rec.Key, Value: rec.Value, ClientTimeUs: rec.ClientTimeMicros, MessageId: rec.MessageID, SchemaId: rec.SchemaID}
	for _, h := range rec.Headers {
		m.Headers = append(m.Headers, &orderlogpb.Header{Key: h.Key, Value: h.Value})
	}
	return m
}
