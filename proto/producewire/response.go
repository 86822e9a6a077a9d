package producewire

import (
	"google.golang.org/protobuf/encoding/protowire"

	"orderlog/proto/orderlogpb"
)

// ProduceResponseSize is the length of r's encoding.
func ProduceResponseSize(r *orderlogpb.ProduceResponse) int {
	n := varintFieldSize(r.RequestId)
	for _, a := range r.Acks {
		n += lengthFieldSize(ackSize(a))
	}
	n += bytesFieldSize(len(r.ErrorCode)) + bytesFieldSize(len(r.ErrorMessage)) + varintFieldSize(r.ExpectedSeq)
	return n + len(unknownFields(r))
}

// AppendProduceResponse appends r's encoding to b, as proto.MarshalAppend
// would. A string that is not UTF-8 fails it (b is returned unchanged).
func AppendProduceResponse(b []byte, r *orderlogpb.ProduceResponse) ([]byte, error) {
	if err := validString(r.ErrorCode); err != nil {
		return b, err
	}
	if err := validString(r.ErrorMessage); err != nil {
		return b, err
	}
	b = appendVarintField(b, 1, r.RequestId)
	for _, a := range r.Acks {
		b = appendLength(b, 2, ackSize(a))
		b = appendAck(b, a)
	}
	b = appendStringField(b, 3, r.ErrorCode)
	b = appendStringField(b, 4, r.ErrorMessage)
	b = appendVarintField(b, 5, r.ExpectedSeq)
	return append(b, unknownFields(r)...), nil
}

func ackSize(a *orderlogpb.Ack) int {
	if a == nil {
		return 0
	}
	return varintFieldSize(a.Offset) + boolFieldSize(a.Duplicate) + boolFieldSize(a.DuplicateWithoutOffset) +
		varintFieldSize(uint64(a.Partition)) + len(unknownFields(a))
}

func appendAck(b []byte, a *orderlogpb.Ack) []byte {
	if a == nil {
		return b
	}
	b = appendVarintField(b, 1, a.Offset)
	b = appendBoolField(b, 2, a.Duplicate)
	b = appendBoolField(b, 3, a.DuplicateWithoutOffset)
	b = appendVarintField(b, 4, uint64(a.Partition))
	return append(b, unknownFields(a)...)
}

// DecodeProduceResponse parses b into r (which it resets) as proto.Unmarshal
// would, unknown fields dropped. The acks share one allocation; nothing
// keeps b.
func DecodeProduceResponse(b []byte, r *orderlogpb.ProduceResponse) error {
	*r = orderlogpb.ProduceResponse{}
	var slab []orderlogpb.Ack
	if n := countFields(b, 2); n > 0 {
		slab = make([]orderlogpb.Ack, n)
		r.Acks = make([]*orderlogpb.Ack, 0, n)
	}
	return eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) (bool, error) {
		var err error
		switch {
		case num == 1 && typ == protowire.VarintType:
			r.RequestId = x
		case num == 2 && typ == protowire.BytesType:
			a := take(&slab)
			err = decodeAck(v, a)
			r.Acks = append(r.Acks, a)
		case num == 3 && typ == protowire.BytesType:
			r.ErrorCode, err = utf8String(v)
		case num == 4 && typ == protowire.BytesType:
			r.ErrorMessage, err = utf8String(v)
		case num == 5 && typ == protowire.VarintType:
			r.ExpectedSeq = x
		default:
			return false, nil
		}
		return true, err
	})
}

func decodeAck(b []byte, a *orderlogpb.Ack) error {
	return eachField(b, func(num protowire.Number, typ protowire.Type, _ []byte, x uint64) (bool, error) {
		switch {
		case num == 1 && typ == protowire.VarintType:
			a.Offset = x
		case num == 2 && typ == protowire.VarintType:
			a.Duplicate = x != 0
		case num == 3 && typ == protowire.VarintType:
			a.DuplicateWithoutOffset = x != 0
		case num == 4 && typ == protowire.VarintType:
			a.Partition = uint32(x)
		default:
			return false, nil
		}
		return true, nil
	})
}
