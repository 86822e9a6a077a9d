package producewire

import (
	"orderlog/proto/orderlogpb"
)

// The read streams' pages (Read, Tail and Query answer ReadResponses) carry
// the produce stream's Message inside each StoredMessage, so their encoder
// lives here with the Message encoder: a page of 1,000 messages through the
// protobuf runtime was a fifth of a node's CPU for a range read.

// ReadResponseSize is the length of r's encoding.
func ReadResponseSize(r *orderlogpb.ReadResponse) int {
	n := 0
	for _, m := range r.Messages {
		n += lengthFieldSize(StoredMessageSize(m))
	}
	for _, s := range r.Skipped {
		n += lengthFieldSize(skippedSize(s))
	}
	n += varintFieldSize(r.NextOffset) + varintFieldSize(r.Committed)
	return n + len(unknownFields(r))
}

// AppendReadResponse appends r's encoding to b, as proto.MarshalAppend
// would. A string that is not UTF-8 fails it (b is returned unchanged).
func AppendReadResponse(b []byte, r *orderlogpb.ReadResponse) ([]byte, error) {
	if err := validateReadResponse(r); err != nil {
		return b, err
	}
	for _, m := range r.Messages {
		b = appendLength(b, 1, StoredMessageSize(m))
		b = appendStoredMessage(b, m)
	}
	for _, s := range r.Skipped {
		b = appendLength(b, 2, skippedSize(s))
		b = appendSkipped(b, s)
	}
	b = appendVarintField(b, 3, r.NextOffset)
	b = appendVarintField(b, 4, r.Committed)
	return append(b, unknownFields(r)...), nil
}

// validateReadResponse checks every string of r; a topic equal to the one
// checked before it is not checked again (pages mostly repeat a few).
func validateReadResponse(r *orderlogpb.ReadResponse) error {
	checkedTopic := ""
	for _, s := range r.Messages {
		if err := validateMessage(s.GetMessage(), &checkedTopic); err != nil {
			return err
		}
	}
	for _, s := range r.Skipped {
		if err := validString(s.GetReason()); err != nil {
			return err
		}
	}
	return nil
}

// StoredMessageSize is proto.Size(s). A nil message encodes as an empty
// one, as proto.Marshal does.
func StoredMessageSize(s *orderlogpb.StoredMessage) int {
	if s == nil {
		return 0
	}
	n := varintFieldSize(s.Offset)
	if s.Message != nil {
		n += lengthFieldSize(messageSize(s.Message))
	}
	n += varintFieldSize(s.ProducerId) + varintFieldSize(s.ProducerSeq) + varintFieldSize(uint64(s.IngestTimeUs))
	return n + len(unknownFields(s))
}

func appendStoredMessage(b []byte, s *orderlogpb.StoredMessage) []byte {
	if s == nil {
		return b
	}
	b = appendVarintField(b, 1, s.Offset)
	if s.Message != nil {
		b = appendLength(b, 2, messageSize(s.Message))
		b = appendMessage(b, s.Message)
	}
	b = appendVarintField(b, 3, s.ProducerId)
	b = appendVarintField(b, 4, s.ProducerSeq)
	b = appendVarintField(b, 5, uint64(s.IngestTimeUs))
	return append(b, unknownFields(s)...)
}

func skippedSize(s *orderlogpb.SkippedRange) int {
	if s == nil {
		return 0
	}
	return varintFieldSize(s.First) + varintFieldSize(s.End) + bytesFieldSize(len(s.Reason)) + len(unknownFields(s))
}

func appendSkipped(b []byte, s *orderlogpb.SkippedRange) []byte {
	if s == nil {
		return b
	}
	b = appendVarintField(b, 1, s.First)
	b = appendVarintField(b, 2, s.End)
	b = appendStringField(b, 3, s.Reason)
	return append(b, unknownFields(s)...)
}
