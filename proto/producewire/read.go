package producewire

import (
	"orderlog/proto/orderlogpb"
)

// The read streams' pages (Read, Tail and Query answer ReadResponses) carry
// the produce stream's Message inside each StoredMessage, so their encoder
// lives here with the Message encoder: a page of 1,000 messages through the
// protobuf runtime was a fifth of a node's CPU for a range read.

// ReadEncoder encodes read pages, sizing each message once per page: the
// length prefixes of a StoredMessage and of its Message need the Message's
// size, and computing it again for each (and again for the page's size)
// was a tenth of a node's CPU in a range read. Its scratch is reused from
// page to page; a ReadEncoder is not safe for concurrent use.
type ReadEncoder struct {
	sizes []int // sizes[i]: the size of page.Messages[i].Message
}

// Size validates r (every string must be UTF-8) and returns the length of
// its encoding. Append must follow with the same, unchanged r.
func (e *ReadEncoder) Size(r *orderlogpb.ReadResponse) (int, error) {
	if err := validateReadResponse(r); err != nil {
		return 0, err
	}
	e.sizes = e.sizes[:0]
	n := 0
	for _, m := range r.Messages {
		ms := messageSize(m.GetMessage())
		e.sizes = append(e.sizes, ms)
		n += lengthFieldSize(storedMessageSize(m, ms))
	}
	for _, s := range r.Skipped {
		n += lengthFieldSize(skippedSize(s))
	}
	n += varintFieldSize(r.NextOffset) + varintFieldSize(r.Committed)
	return n + len(unknownFields(r)), nil
}

// Append appends the encoding of r, which Size measured last, to b, as
// proto.MarshalAppend would.
func (e *ReadEncoder) Append(b []byte, r *orderlogpb.ReadResponse) []byte {
	for i, m := range r.Messages {
		ms := e.sizes[i]
		b = appendLength(b, 1, storedMessageSize(m, ms))
		b = appendStoredMessage(b, m, ms)
	}
	for _, s := range r.Skipped {
		b = appendLength(b, 2, skippedSize(s))
		b = appendSkipped(b, s)
	}
	b = appendVarintField(b, 3, r.NextOffset)
	b = appendVarintField(b, 4, r.Committed)
	return append(b, unknownFields(r)...)
}

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
	var e ReadEncoder
	if _, err := e.Size(r); err != nil {
		return b, err
	}
	return e.Append(b, r), nil
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
	return storedMessageSize(s, messageSize(s.GetMessage()))
}

// storedMessageSize is StoredMessageSize for s whose Message is of size
// messageBytes.
func storedMessageSize(s *orderlogpb.StoredMessage, messageBytes int) int {
	if s == nil {
		return 0
	}
	n := varintFieldSize(s.Offset)
	if s.Message != nil {
		n += lengthFieldSize(messageBytes)
	}
	n += varintFieldSize(s.ProducerId) + varintFieldSize(s.ProducerSeq) + varintFieldSize(uint64(s.IngestTimeUs))
	return n + len(unknownFields(s))
}

// appendStoredMessage appends s, whose Message is of size messageBytes.
func appendStoredMessage(b []byte, s *orderlogpb.StoredMessage, messageBytes int) []byte {
	if s == nil {
		return b
	}
	b = appendVarintField(b, 1, s.Offset)
	if s.Message != nil {
		b = appendLength(b, 2, messageBytes)
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
