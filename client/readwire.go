package client

import (
	"bytes"
	"unicode/utf8"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"orderlog/proto/orderlogpb"
)

// decodePage decodes a frame of a read as proto.Unmarshal does, and frees
// raw. The page's bytes fields alias one copy of the frame instead of
// being copied one by one, and its messages are allocated a slab at a
// time: proto.Unmarshal's allocation and copy per field were half of a
// range read's CPU in the client (docs/notes/read-bench.md). A message
// kept after fn returns keeps its whole frame in memory.
//
// The copy lets raw go back to grpcopt's pool at once: nothing can tell
// when the caller lets go of a page, and leaving raw to the garbage
// collector instead cost more (the pool then makes a new buffer of up to
// twice the frame for every frame, and Go clears it; measured: 16 % of the
// client's CPU in memclr against 10 % for the copy).
//
// Anything the fast decoder does not expect (a field it does not know, a
// wire type out of place, a message field twice, which proto merges, text
// that is not UTF-8, a truncated field) goes to proto.Unmarshal instead,
// which decodes it or says what is wrong (FuzzDecodePage compares the two).
func decodePage(raw mem.Buffer) (*Page, error) {
	buf := bytes.Clone(raw.ReadOnlyData())
	raw.Free()
	page := &Page{}
	if decodePageFast(buf, page, &messageSlabs{}) {
		return page, nil
	}
	page = &Page{}
	if err := proto.Unmarshal(buf, page); err != nil {
		return nil, err
	}
	return page, nil
}

// pageDecoder decodes the frames of one stream. A borrowing decoder decodes
// each frame where gRPC received it, without the copy, frees that buffer
// (back to grpcopt's pool) when the next frame comes or the stream ends, and
// hands out the same page and messages again for the next frame: its caller
// is done with a page when fn returns. The copy into fresh memory was a
// third of the client's CPU in a range read (docs/notes/read-bench.md).
type pageDecoder struct {
	borrow bool
	page   Page
	slabs  messageSlabs
	held   mem.Buffer // the frame page aliases; freed at the next frame
}

func (d *pageDecoder) decode(raw mem.Buffer) (*Page, error) {
	if !d.borrow {
		return decodePage(raw)
	}
	d.release()
	d.slabs.reset()
	d.page = Page{Messages: d.page.Messages[:0]}
	buf := raw.ReadOnlyData()
	if decodePageFast(buf, &d.page, &d.slabs) {
		d.held = raw
		return &d.page, nil
	}
	defer raw.Free()
	page := &Page{} // proto.Unmarshal copies: nothing aliases raw
	if err := proto.Unmarshal(buf, page); err != nil {
		return nil, err
	}
	return page, nil
}

// release frees the frame the last page aliases.
func (d *pageDecoder) release() {
	if d.held != nil {
		d.held.Free()
		d.held = nil
	}
}

// The field numbers of orderlog.proto's ReadResponse, StoredMessage,
// Message, Header and SkippedRange, as decodePageFast reads them.
const (
	pageMessages, pageSkipped, pageNextOffset, pageCommitted                           = 1, 2, 3, 4
	storedOffset, storedMessage, storedProducerID, storedProducerSeq, storedIngestUs   = 1, 2, 3, 4, 5
	messageTopic, messageKey, messageValue, messageHeaders, messageClientUs, messageID = 1, 2, 3, 4, 5, 6
	messageSchemaID                                                                    = 7
	headerKey, headerValue                                                             = 1, 2
	skippedFirst, skippedEnd, skippedReason                                            = 1, 2, 3
)

// decodedMessage is a page's StoredMessage and its Message in one
// allocation, taken from slabs of decodeSlab.
type decodedMessage struct {
	stored  orderlogpb.StoredMessage
	message orderlogpb.Message
}

const decodeSlab = 256

// messageSlabs hands out a page's decodedMessages, allocating them a slab
// at a time. After reset it hands out the same ones again, cleared.
type messageSlabs struct {
	slabs [][]decodedMessage
	slab  int // the slab take takes from
	next  int // its next free element
}

func (s *messageSlabs) take() *decodedMessage {
	if s.slab < len(s.slabs) && s.next == decodeSlab {
		s.slab, s.next = s.slab+1, 0
	}
	if s.slab == len(s.slabs) {
		s.slabs = append(s.slabs, make([]decodedMessage, decodeSlab))
	}
	m := &s.slabs[s.slab][s.next]
	s.next++
	return m
}

func (s *messageSlabs) reset() {
	for i := 0; i <= s.slab && i < len(s.slabs); i++ {
		clear(s.slabs[i])
	}
	s.slab, s.next = 0, 0
}

// decodePageFast decodes buf into page, its bytes fields aliasing buf and
// its messages taken from slabs; false: proto.Unmarshal must decode it.
func decodePageFast(buf []byte, page *Page, slabs *messageSlabs) bool {
	return eachField(buf, func(num protowire.Number, v uint64, b []byte) bool {
		switch num {
		case pageMessages:
			m := slabs.take()
			page.Messages = append(page.Messages, &m.stored)
			return b != nil && decodeStored(b, m)
		case pageSkipped:
			s := &orderlogpb.SkippedRange{}
			page.Skipped = append(page.Skipped, s)
			return b != nil && decodeSkipped(b, s)
		case pageNextOffset:
			page.NextOffset = v
			return b == nil
		case pageCommitted:
			page.Committed = v
			return b == nil
		}
		return false
	})
}

func decodeStored(buf []byte, m *decodedMessage) bool {
	s, seenMessage := &m.stored, false
	return eachField(buf, func(num protowire.Number, v uint64, b []byte) bool {
		switch num {
		case storedMessage:
			if b == nil || seenMessage { // proto merges a second one into the first
				return false
			}
			seenMessage, s.Message = true, &m.message
			return decodeMessage(b, &m.message)
		case storedOffset:
			s.Offset = v
		case storedProducerID:
			s.ProducerId = v
		case storedProducerSeq:
			s.ProducerSeq = v
		case storedIngestUs:
			s.IngestTimeUs = int64(v)
		default:
			return false
		}
		return b == nil
	})
}

func decodeMessage(buf []byte, m *orderlogpb.Message) bool {
	return eachField(buf, func(num protowire.Number, v uint64, b []byte) bool {
		switch num {
		case messageTopic:
			m.Topic = string(b)
			return b != nil && utf8.Valid(b)
		case messageKey:
			m.Key = aliased(b)
		case messageValue:
			m.Value = aliased(b)
		case messageID:
			m.MessageId = aliased(b)
		case messageHeaders:
			h := &orderlogpb.Header{}
			m.Headers = append(m.Headers, h)
			return b != nil && decodeHeader(b, h)
		case messageClientUs:
			m.ClientTimeUs = int64(v)
			return b == nil
		case messageSchemaID:
			m.SchemaId = uint32(v) // truncated, as proto.Unmarshal does
			return b == nil
		default:
			return false
		}
		return b != nil
	})
}

func decodeHeader(buf []byte, h *orderlogpb.Header) bool {
	return eachField(buf, func(num protowire.Number, _ uint64, b []byte) bool {
		switch num {
		case headerKey:
			h.Key = string(b)
			return b != nil && utf8.Valid(b)
		case headerValue:
			h.Value = aliased(b)
			return b != nil
		}
		return false
	})
}

func decodeSkipped(buf []byte, s *orderlogpb.SkippedRange) bool {
	return eachField(buf, func(num protowire.Number, v uint64, b []byte) bool {
		switch num {
		case skippedFirst:
			s.First = v
		case skippedEnd:
			s.End = v
		case skippedReason:
			s.Reason = string(b)
			return b != nil && utf8.Valid(b)
		default:
			return false
		}
		return b == nil
	})
}

// eachField calls field with each field of a message: a varint field's
// value (b nil), or a length-delimited field's bytes (b not nil, maybe
// empty). Any other wire type, a bad tag or a truncated field, or field
// returning false, makes it return false.
func eachField(buf []byte, field func(num protowire.Number, v uint64, b []byte) bool) bool {
	for len(buf) > 0 {
		var num protowire.Number
		var typ protowire.Type
		n := 1
		if c := buf[0]; c < 0x80 && c >= 1<<3 { // a one-byte tag, as every field here has
			num, typ = protowire.Number(c>>3), protowire.Type(c&7)
		} else if num, typ, n = protowire.ConsumeTag(buf); n < 0 {
			return false
		}
		buf = buf[n:]
		var v uint64
		var b []byte
		switch {
		case typ == protowire.VarintType && len(buf) > 0 && buf[0] < 0x80:
			v, n = uint64(buf[0]), 1
		case typ == protowire.VarintType:
			v, n = protowire.ConsumeVarint(buf)
		case typ == protowire.BytesType:
			b, n = protowire.ConsumeBytes(buf)
			if b == nil && n >= 0 {
				b = buf[:0] // present and empty
			}
		default:
			return false
		}
		if n < 0 || !field(num, v, b) {
			return false
		}
		buf = buf[n:]
	}
	return true
}

// aliased is a bytes field's value as proto.Unmarshal leaves it: nil when
// empty, and otherwise capped at its own length, so that an append to it
// copies instead of overwriting the next field.
func aliased(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b[:len(b):len(b)]
}
