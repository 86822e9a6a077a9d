package producewire

import (
	"bytes"
	"errors"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"orderlog/proto/orderlogpb"
)

func responseSeeds() []*orderlogpb.ProduceResponse {
	return []*orderlogpb.ProduceResponse{
		{},
		{RequestId: 3, Acks: []*orderlogpb.Ack{{Offset: 0}, {Offset: 1 << 40, Duplicate: true}, {DuplicateWithoutOffset: true, Duplicate: true}}},
		{RequestId: 4, ErrorCode: "OUT_OF_ORDER_SEQUENCE", ErrorMessage: "expected seq 5 — got 9", ExpectedSeq: 5},
		{Acks: []*orderlogpb.Ack{nil, {Offset: 7}}}, // a nil element encodes as an empty ack
		{RequestId: 5, Acks: []*orderlogpb.Ack{{Offset: 9, Partition: 15}, {Offset: 10, Duplicate: true, Partition: 1023}}},
	}
}

// withUnknownFields returns m decoded from its encoding plus a field its
// schema does not know, so m carries unknown fields.
func withUnknownFields[M proto.Message](t testing.TB, m M) M {
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	b = protowire.AppendTag(b, 99, protowire.BytesType)
	b = protowire.AppendString(b, "from a newer schema")
	out := m.ProtoReflect().New().Interface().(M)
	if err := proto.Unmarshal(b, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// checkEncoding asserts that size and appendTo give exactly proto.Marshal's
// bytes for m, after a prefix they must keep.
func checkEncoding[M proto.Message](t testing.TB, m M, size func(M) int, appendTo func([]byte, M) ([]byte, error)) {
	t.Helper()
	want, wantErr := proto.Marshal(m)
	prefix := []byte("prefix")
	got, err := appendTo(bytes.Clone(prefix), m)
	if (err == nil) != (wantErr == nil) {
		t.Fatalf("encode error %v, proto.Marshal error %v", err, wantErr)
	}
	if err != nil {
		if !bytes.Equal(got, prefix) {
			t.Fatalf("a refused message left %q behind", got[len(prefix):])
		}
		return
	}
	if !bytes.HasPrefix(got, prefix) || !bytes.Equal(got[len(prefix):], want) {
		t.Fatalf("encoded %x\nproto.Marshal %x", got[len(prefix):], want)
	}
	if n := size(m); n != len(want) {
		t.Fatalf("size %d, encoding is %d bytes", n, len(want))
	}
}

func TestEncodersMatchProtoMarshal(t *testing.T) {
	requests := produceSeeds()
	requests = append(requests,
		&orderlogpb.ProduceRequest{Messages: []*orderlogpb.Message{nil, {Topic: "a", Headers: []*orderlogpb.Header{nil}}}},
		withUnknownFields(t, produceSeeds()[1]),
		&orderlogpb.ProduceRequest{Messages: []*orderlogpb.Message{withUnknownFields(t, produceSeeds()[1].Messages[1])}},
	)
	for _, req := range requests {
		checkEncoding(t, req, ProduceRequestSize, AppendProduceRequest)
	}
	responses := append(responseSeeds(), withUnknownFields(t, responseSeeds()[1]))
	for _, resp := range responses {
		checkEncoding(t, resp, ProduceResponseSize, AppendProduceResponse)
	}
}

// Strings that are not UTF-8 are refused wherever they are, including a
// topic that follows valid ones.
func TestEncodersRefuseInvalidUTF8(t *testing.T) {
	bad := "\xff"
	requests := []*orderlogpb.ProduceRequest{
		{IdempotencyKey: bad},
		{Messages: []*orderlogpb.Message{{Topic: "ok"}, {Topic: "ok"}, {Topic: bad}}},
		{Messages: []*orderlogpb.Message{{Headers: []*orderlogpb.Header{{Key: bad}}}}},
	}
	for _, req := range requests {
		if _, err := AppendProduceRequest(nil, req); !errors.Is(err, ErrInvalidUTF8) {
			t.Errorf("%v: error %v, want ErrInvalidUTF8", req, err)
		}
		checkEncoding(t, req, ProduceRequestSize, AppendProduceRequest)
	}
	for _, resp := range []*orderlogpb.ProduceResponse{{ErrorCode: bad}, {ErrorMessage: bad}} {
		if _, err := AppendProduceResponse(nil, resp); !errors.Is(err, ErrInvalidUTF8) {
			t.Errorf("%v: error %v, want ErrInvalidUTF8", resp, err)
		}
	}
}

// Whatever message proto.Unmarshal makes of some bytes (unknown fields
// included), the hand encoder writes it back exactly as proto.Marshal does.
func FuzzAppendProduceRequest(f *testing.F) {
	fuzzEncoder(f, produceSeeds(), ProduceRequestSize, AppendProduceRequest)
}

func FuzzAppendProduceResponse(f *testing.F) {
	fuzzEncoder(f, responseSeeds(), ProduceResponseSize, AppendProduceResponse)
}

func fuzzEncoder[M proto.Message](f *testing.F, seeds []M, size func(M) int, appendTo func([]byte, M) ([]byte, error)) {
	for _, m := range seeds {
		b, _ := proto.Marshal(m)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m := seeds[0].ProtoReflect().New().Interface().(M)
		if proto.Unmarshal(b, m) != nil {
			return
		}
		checkEncoding(t, m, size, appendTo)
	})
}

// The hand decoder agrees with proto.Unmarshal on every input: the same
// fields, the same refusals.
func FuzzDecodeProduceResponse(f *testing.F) {
	for _, resp := range responseSeeds() {
		b, _ := proto.Marshal(resp)
		f.Add(b)
	}
	f.Add([]byte{0x12, 0x02, 0x08})       // an ack cut short
	f.Add([]byte{0x1a, 0x01, 0xff})       // error_code not UTF-8
	f.Add([]byte{0x12, 0x02, 0x10, 0x02}) // duplicate = 2 is true
	f.Add([]byte{0x0a, 0x01, 0x05, 0x08, 0x01})
	f.Fuzz(func(t *testing.T, b []byte) {
		want := &orderlogpb.ProduceResponse{}
		wantErr := proto.UnmarshalOptions{DiscardUnknown: true}.Unmarshal(b, want)
		got := &orderlogpb.ProduceResponse{RequestId: 99, ErrorCode: "stale"} // reset by the decoder
		err := DecodeProduceResponse(b, got)
		if (err == nil) != (wantErr == nil) {
			t.Fatalf("decode error %v, proto.Unmarshal error %v", err, wantErr)
		}
		if err == nil && !proto.Equal(got, want) {
			t.Fatalf("decoded %v, proto.Unmarshal %v", got, want)
		}
	})
}
