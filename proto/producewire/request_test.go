package producewire

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"orderlog/proto/orderlogpb"
)

func produceSeeds() []*orderlogpb.ProduceRequest {
	return []*orderlogpb.ProduceRequest{
		{},
		{ProducerId: 7, Epoch: 2, FirstSeq: 100, RequestId: 9, Messages: []*orderlogpb.Message{
			{Topic: "orders", Key: []byte("k1"), Value: []byte("hello"), ClientTimeUs: -5, MessageId: []byte{1, 2}, SchemaId: 1 << 31},
			{Topic: "orders", Value: []byte{}, Headers: []*orderlogpb.Header{{Key: "h", Value: []byte("v")}, {Key: "é"}}},
		}},
		{IdempotencyKey: "key-1", Messages: []*orderlogpb.Message{{Topic: "t", Value: make([]byte, 1024)}}},
		{Ack: orderlogpb.AckMode_ACK_MODE_LEADER, Messages: []*orderlogpb.Message{{Value: []byte("x")}}},
		{ProducerId: 3, Epoch: 1, Messages: []*orderlogpb.Message{{Value: []byte("out")}}, GroupCommit: &orderlogpb.GroupCommit{
			Group: "g", MemberId: "m-1", Generation: 4, Offsets: []*orderlogpb.PartitionOffset{{Topic: "in", Partition: 2, Offset: 77}}}},
		{Ack: orderlogpb.AckMode(-3), RequestId: 2}, // an enum value this schema does not name
		// Repeated topics share a string; a change of topic, or none, must not.
		{Messages: []*orderlogpb.Message{{Topic: "a"}, {Topic: "a"}, {Topic: "b"}, {}, {Topic: "b"}, {Topic: "a"}}},
	}
}

// The hand decoder agrees with proto.Unmarshal on every input: the same
// messages, the same refusals.
func FuzzDecodeProduceRequest(f *testing.F) {
	for _, req := range produceSeeds() {
		b, err := proto.Marshal(req)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0x22, 0x02, 0x0a, 0x01})             // a message whose topic is cut short
	f.Add([]byte{0x38, 0xff, 0xff, 0xff, 0xff, 0x7f}) // an ack mode beyond int32
	f.Add([]byte{0x22, 0x03, 0x0a, 0x01, 0xff})       // topic not UTF-8
	f.Add([]byte{0x0a, 0x01, 0x05, 0x08, 0x01})       // field 1 with the wrong wire type
	f.Add([]byte{0x2b, 0x08, 0x01, 0x2c, 0x28, 0x03}) // a group, then request_id
	f.Fuzz(func(t *testing.T, b []byte) {
		want := &orderlogpb.ProduceRequest{}
		wantErr := proto.UnmarshalOptions{DiscardUnknown: true}.Unmarshal(b, want)
		got, err := DecodeProduceRequest(b)
		if (err == nil) != (wantErr == nil) {
			t.Fatalf("decode error %v, proto.Unmarshal error %v", err, wantErr)
		}
		if err == nil && !proto.Equal(got, want) {
			t.Fatalf("decoded %v, proto.Unmarshal %v", got, want)
		}
	})
}

// Values alias the input buffer (nothing is copied) and cannot grow into it.
func TestDecodeProduceRequestAliasesValues(t *testing.T) {
	b, err := proto.Marshal(produceSeeds()[1])
	if err != nil {
		t.Fatal(err)
	}
	req, err := DecodeProduceRequest(b)
	if err != nil {
		t.Fatal(err)
	}
	v := req.Messages[0].Value
	if cap(v) != len(v) {
		t.Fatalf("value cap %d beyond its length %d", cap(v), len(v))
	}
	for i := range b {
		b[i] = 'X'
	}
	if string(v) != "XXXXX" {
		t.Fatalf("value %q does not alias the input", v)
	}
	if req.Messages[0].Topic != "orders" {
		t.Fatalf("topic %q changed with the input: strings must be copied", req.Messages[0].Topic)
	}
}
