package producewire

import (
	"errors"
	"testing"

	"orderlog/proto/orderlogpb"
)

func readSeeds() []*orderlogpb.ReadResponse {
	return []*orderlogpb.ReadResponse{
		{},
		{NextOffset: 1 << 40, Committed: 1<<40 + 7},
		{Messages: []*orderlogpb.StoredMessage{
			{Offset: 0, ProducerId: 7, ProducerSeq: 1, IngestTimeUs: 1_700_000_000_000_000, Message: &orderlogpb.Message{
				Topic: "orders", Key: []byte("k1"), Value: make([]byte, 1024), ClientTimeUs: -5, MessageId: []byte{1, 2}, SchemaId: 7,
				Headers: []*orderlogpb.Header{{Key: "h", Value: []byte("v")}, {Key: "é"}}}},
			{Offset: 3, Message: &orderlogpb.Message{Topic: "orders"}},
			{Offset: 4, IngestTimeUs: -1},
		}, Skipped: []*orderlogpb.SkippedRange{{First: 1, End: 3}, {First: 5, End: 9, Reason: "compacted"}}, NextOffset: 9, Committed: 12},
		{Messages: []*orderlogpb.StoredMessage{nil, {Offset: 2, Message: &orderlogpb.Message{Headers: []*orderlogpb.Header{nil}}}}},
		{Skipped: []*orderlogpb.SkippedRange{nil, {}}},
	}
}

func TestReadResponseEncoderMatchesProtoMarshal(t *testing.T) {
	responses := append(readSeeds(),
		withUnknownFields(t, readSeeds()[2]),
		&orderlogpb.ReadResponse{Messages: []*orderlogpb.StoredMessage{withUnknownFields(t, readSeeds()[2].Messages[0])}},
		&orderlogpb.ReadResponse{Skipped: []*orderlogpb.SkippedRange{withUnknownFields(t, readSeeds()[2].Skipped[1])}},
	)
	for _, resp := range responses {
		checkEncoding(t, resp, ReadResponseSize, AppendReadResponse)
	}
}

func TestReadResponseEncoderRefusesInvalidUTF8(t *testing.T) {
	bad := "\xff"
	msg := func(topic, header string) *orderlogpb.StoredMessage {
		return &orderlogpb.StoredMessage{Message: &orderlogpb.Message{Topic: topic, Headers: []*orderlogpb.Header{{Key: header}}}}
	}
	responses := []*orderlogpb.ReadResponse{
		{Messages: []*orderlogpb.StoredMessage{msg("ok", ""), msg("ok", ""), msg(bad, "")}},
		{Messages: []*orderlogpb.StoredMessage{msg("ok", bad)}},
		{Skipped: []*orderlogpb.SkippedRange{{Reason: bad}}},
	}
	for _, resp := range responses {
		if _, err := AppendReadResponse(nil, resp); !errors.Is(err, ErrInvalidUTF8) {
			t.Errorf("%v: error %v, want ErrInvalidUTF8", resp, err)
		}
		checkEncoding(t, resp, ReadResponseSize, AppendReadResponse)
	}
}

// Whatever page proto.Unmarshal makes of some bytes (unknown fields
// included), the hand encoder writes it back exactly as proto.Marshal does.
func FuzzAppendReadResponse(f *testing.F) {
	fuzzEncoder(f, readSeeds(), ReadResponseSize, AppendReadResponse)
}
