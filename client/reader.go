package client

import (
	"bytes"
	"context"
	"errors"
	"io"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"orderlog/internal/apierr"
	"orderlog/internal/grpcopt"
	"orderlog/proto/orderlogpb"
)

// Page is one frame of a read: messages in offset order and the holes
// skipped among them.
type Page = orderlogpb.ReadResponse

// Read calls fn for each frame of messages in [from, committed watermark),
// at most limit messages (0 = no limit), in offset order. A read broken by
// a failing node goes on at the next endpoint from the next offset, so fn
// sees every message once (the watermark it stops at is then that node's).
func (c *Client) Read(ctx context.Context, from uint64, limit uint32, fn func(*Page) error) error {
	return c.pages(ctx, from, limit, func(ctx context.Context, rc orderlogpb.ReaderClient, from uint64, limit uint32) (pageStream, error) {
		return rc.Read(ctx, &orderlogpb.ReadRequest{FromOffset: from, Limit: limit})
	}, fn)
}

// Query is Read filtered by topic and/or key, still in global order; limit
// counts matching messages.
func (c *Client) Query(ctx context.Context, req *orderlogpb.QueryRequest, fn func(*Page) error) error {
	return c.pages(ctx, req.FromOffset, req.Limit, func(ctx context.Context, rc orderlogpb.ReaderClient, from uint64, limit uint32) (pageStream, error) {
		resumed := proto.CloneOf(req) // the caller keeps req
		resumed.FromOffset, resumed.Limit = from, limit
		return rc.Query(ctx, resumed)
	}, fn)
}

type openPages func(ctx context.Context, rc orderlogpb.ReaderClient, from uint64, limit uint32) (pageStream, error)

// pages runs a range stream on the current endpoint and, when its node
// fails, resumes it at the next endpoint from the last page's next offset
// with what is left of limit. It gives up when every endpoint has failed
// with no page in between.
func (c *Client) pages(ctx context.Context, from uint64, limit uint32, open openPages, fn func(*Page) error) error {
	limited, remaining := limit > 0, limit
	addr := c.endpoints.current()
	failures := 0
	for {
		conn, err := c.endpoints.conn(addr)
		if err != nil {
			return err
		}
		err = c.pagesOnce(ctx, orderlogpb.NewReaderClient(conn), from, remaining, open, func(p *Page) error {
			failures = 0
			from = max(from, p.NextOffset)
			if limited {
				remaining -= min(remaining, uint32(len(p.Messages)))
			}
			return fn(p)
		})
		var fromCaller callerError
		switch {
		case errors.As(err, &fromCaller):
			return fromCaller.err
		case !nodeFailed(ctx, err):
			return err
		case limited && remaining == 0: // every message asked for arrived
			return nil
		}
		c.nodeFailed(addr)
		if failures++; failures >= len(c.endpoints.list()) {
			return err
		}
		addr = c.endpoints.after(addr)
	}
}

func (c *Client) pagesOnce(ctx context.Context, rc orderlogpb.ReaderClient, from uint64, limit uint32, open openPages, fn func(*Page) error) error {
	stream, err := open(ctx, rc, from, limit)
	if err != nil {
		return apierr.FromGRPC(err)
	}
	return drain(stream, func(p *Page) error {
		if err := fn(p); err != nil {
			return callerError{err}
		}
		return nil
	})
}

// Tail calls fn for each frame from offset from on, following the committed
// watermark, until ctx ends or fn returns an error. A tail broken by a
// retryable error (a node stopping or restarting, a leader change) is taken
// up again at the next endpoint from the next offset after a pause, so fn
// still sees every message once, in order.
func (c *Client) Tail(ctx context.Context, from uint64, fn func(*Page) error) error {
	next, pause := from, tailRetryFirst
	for {
		addr := c.endpoints.current()
		conn, err := c.endpoints.conn(addr)
		if err != nil {
			return err
		}
		err = c.tailOnce(ctx, orderlogpb.NewReaderClient(conn), next, func(p *Page) error {
			next, pause = p.NextOffset, tailRetryFirst
			if err := fn(p); err != nil {
				return callerError{err}
			}
			return nil
		})
		var fromCaller callerError
		switch {
		case errors.As(err, &fromCaller):
			return fromCaller.err
		case ctx.Err() != nil:
			return err
		case err == nil || apierr.As(err).Class() != apierr.ClassRetry:
			return err
		}
		c.nodeFailed(addr)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(pause):
		}
		pause = min(2*pause, tailRetryMax)
	}
}

// The pauses before a broken tail is taken up again.
const (
	tailRetryFirst = 50 * time.Millisecond
	tailRetryMax   = 2 * time.Second
)

// callerError carries an error fn returned through the stream's drain.
type callerError struct{ err error }

func (e callerError) Error() string { return e.err.Error() }

func (c *Client) tailOnce(ctx context.Context, rc orderlogpb.ReaderClient, from uint64, fn func(*Page) error) error {
	stream, err := rc.Tail(ctx, &orderlogpb.TailRequest{FromOffset: from})
	if err != nil {
		return apierr.FromGRPC(err)
	}
	return drain(stream, fn)
}

// pageStream is a Read, Query or Tail stream; drain receives its frames
// undecoded (grpcopt.Raw) and decodes them with decodePage.
type pageStream interface {
	RecvMsg(m any) error
}

func drain(stream pageStream, fn func(*Page) error) error {
	for {
		var raw grpcopt.Raw
		err := stream.RecvMsg(&raw)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return apierr.FromGRPC(err)
		}
		page, err := decodePage(raw.Buf)
		if err != nil {
			return apierr.FromGRPC(status.Errorf(codes.Internal, "grpc: failed to unmarshal the received message: %v", err))
		}
		if err := fn(page); err != nil {
			return err
		}
	}
}

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
	if decodePageFast(buf, page) {
		return page, nil
	}
	page = &Page{}
	if err := proto.Unmarshal(buf, page); err != nil {
		return nil, err
	}
	return page, nil
}

// The field numbers of orderlog.proto's ReadResponse, StoredMessage,
// Message, Header and SkippedRange, as decodePageFast reads them.
const (
	pageMessages, pageSkipped, pageNextOffset, pageCommitted                           = 1, 2, 3, 4
	storedOffset, storedMessage, storedProducerID, storedProducerSeq, storedIngestUs   = 1, 2, 3, 4, 5
	messageTopic, messageKey, messageValue, messageHeaders, messageClientUs, messageID = 1, 2, 3, 4, 5, 6
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

// decodePageFast decodes buf into page, its bytes fields aliasing buf;
// false: proto.Unmarshal must decode it.
func decodePageFast(buf []byte, page *Page) bool {
	var slab []decodedMessage
	return eachField(buf, func(num protowire.Number, v uint64, b []byte) bool {
		switch num {
		case pageMessages:
			if len(slab) == 0 {
				slab = make([]decodedMessage, decodeSlab)
			}
			m := &slab[0]
			slab = slab[1:]
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
