package reader

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"orderlog/ingest/batch"
	"orderlog/proto/orderlogpb"
	"orderlog/proto/producewire"
)

// TestStoredMessagesAreToProtos: a page's message is batch.ToProto's, and
// the size a page charges for it is proto.Size's, for records with and without each field
// (empty and long bytes, negative times, headers with empty parts).
func TestStoredMessagesAreToProtos(t *testing.T) {
	long := make([]byte, 300)
	records := map[string]batch.Record{
		"empty":    {},
		"value":    {Topic: "t", Value: []byte("v")},
		"long":     {Topic: string(long), Key: long, Value: long, MessageID: long},
		"negative": {Topic: "t", Key: []byte("k"), ClientTimeMicros: -1},
		"headers": {Topic: "orders", Key: []byte("customer-1"), Value: []byte(`{"qty":1}`), ClientTimeMicros: 1764750000123456,
			MessageID: []byte("m1"), Headers: []batch.MessageHeader{{Key: "content-type", Value: []byte("application/json")}, {Key: "", Value: nil}, {Key: "k"}}},
	}
	producers := []struct {
		id, seq uint64
		ingest  int64
		offset  uint64
	}{{0, 0, 0, 0}, {1, 0, 1764750000123456, 7}, {1<<64 - 1, 1 << 40, -5, 1 << 62}}
	for name, rec := range records {
		for _, p := range producers {
			var s storedMessage
			got := s.fill(p.offset, &rec, p.id, p.seq, p.ingest)
			want := &orderlogpb.StoredMessage{Offset: p.offset, Message: batch.ToProto(&rec), ProducerId: p.id, ProducerSeq: p.seq, IngestTimeUs: p.ingest}
			if !proto.Equal(got, want) {
				t.Errorf("%s %+v: filled %v, ToProto gives %v", name, p, got, want)
			}
			if size, wantSize := producewire.StoredMessageSize(got), proto.Size(want); size != wantSize {
				t.Errorf("%s %+v: StoredMessageSize %d, proto.Size %d", name, p, size, wantSize)
			}
		}
	}
}

// TestProducerOfFindsTheRun: each record's producer and seq come from the
// run that holds it.
func TestProducerOfFindsTheRun(t *testing.T) {
	e := &decodedEntry{header: batch.Header{Runs: []batch.ProducerRun{
		{ProducerID: 1, FirstSeq: 10, Count: 2}, {ProducerID: 2, FirstSeq: 0, Count: 0}, {ProducerID: 3, FirstSeq: 5, Count: 3}}},
		runEnds: []int{2, 2, 5}}
	want := [][2]uint64{{1, 10}, {1, 11}, {3, 5}, {3, 6}, {3, 7}, {0, 0}}
	for i, w := range want {
		if id, seq := e.producerOf(i); id != w[0] || seq != w[1] {
			t.Errorf("record %d: producer %d seq %d, want %d %d", i, id, seq, w[0], w[1])
		}
	}
}
