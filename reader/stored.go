package reader

import (
	"orderlog/ingest/batch"
	"orderlog/proto/orderlogpb"
)

// storedMessage is a page's message and the StoredMessage around it in one
// allocation; pages take them from slabs of up to slabMessages, so that a
// page of 1,000 messages costs a handful of allocations, not 2,000.
type storedMessage struct {
	stored  orderlogpb.StoredMessage
	message orderlogpb.Message
}

// slabMessages is the most storedMessages allocated at once.
const slabMessages = 256

// fill makes s the stored message of rec (as batch.ToProto makes its
// message: the record's bytes aliased, not copied) and returns it.
func (s *storedMessage) fill(offset uint64, rec *batch.Record, producerID, seq uint64, ingestTime int64) *orderlogpb.StoredMessage {
	m := &s.message
	m.Topic, m.Key, m.Value, m.ClientTimeUs, m.MessageId, m.SchemaId = rec.Topic, rec.Key, rec.Value, rec.ClientTimeMicros, rec.MessageID, rec.SchemaID
	if len(rec.Headers) > 0 {
		headers := make([]orderlogpb.Header, len(rec.Headers))
		m.Headers = make([]*orderlogpb.Header, len(rec.Headers))
		for i, h := range rec.Headers {
			headers[i].Key, headers[i].Value = h.Key, h.Value
			m.Headers[i] = &headers[i]
		}
	}
	st := &s.stored
	st.Offset, st.Message, st.ProducerId, st.ProducerSeq, st.IngestTimeUs = offset, m, producerID, seq, ingestTime
	return st
}
