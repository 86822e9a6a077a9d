package client

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"orderlog/internal/grpcopt"
	"orderlog/proto/orderlogpb"
)

// samplePage has every field of a read frame set somewhere, and some left
// empty.
func samplePage() *Page {
	long := bytes.Repeat([]byte("0123456789"), 150)
	return &Page{
		Messages: []*orderlogpb.StoredMessage{
			{Offset: 0, Message: &orderlogpb.Message{}},
			{Offset: 1, Message: &orderlogpb.Message{Topic: "t", Value: []byte("v")}, ProducerId: 3, ProducerSeq: 0, IngestTimeUs: 1764750000123456},
			{Offset: 1 << 62, Message: &orderlogpb.Message{Topic: "orders", Key: []byte("customer-1"), Value: long, ClientTimeUs: -5, MessageId: []byte("m1"), SchemaId: 42,
				Headers: []*orderlogpb.Header{{Key: "content-type", Value: []byte("application/json")}, {}, {Key: "é", Value: []byte{0xff}}}},
				ProducerId: 1<<64 - 1, ProducerSeq: 1 << 40, IngestTimeUs: -1},
			{Offset: 5},
		},
		Skipped:    []*orderlogpb.SkippedRange{{First: 2, End: 5}, {First: 6, End: 7, Reason: "compacted"}},
		NextOffset: 8, Committed: 9,
	}
}

func pooled(b []byte) mem.Buffer { return mem.SliceBuffer(bytes.Clone(b)) }

// TestDecodePageIsProtoUnmarshal: a frame decodes to what proto.Unmarshal
// gives, with the fast decoder (not its fallback), and its bytes fields
// are capped so that an append does not overwrite the next field.
func TestDecodePageIsProtoUnmarshal(t *testing.T) {
	wire, err := proto.Marshal(samplePage())
	if err != nil {
		t.Fatal(err)
	}
	if !decodePageFast(bytes.Clone(wire), &Page{}, &messageSlabs{}) {
		t.Fatal("the fast decoder refused a frame the server sends")
	}
	got, err := decodePage(pooled(wire))
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(got, samplePage()) {
		t.Fatalf("decoded %v\nwant %v", got, samplePage())
	}
	key := got.Messages[2].Message.Key
	if cap(key) != len(key) || got.Messages[0].Message.Value != nil {
		t.Fatalf("key cap %d len %d; empty value %v", cap(key), len(key), got.Messages[0].Message.Value)
	}
}

// TestDecodePageFallsBack: frames the fast decoder does not expect decode
// as proto.Unmarshal decodes them: an unknown field is kept, a message
// field twice is merged, and text that is not UTF-8 is an error.
func TestDecodePageFallsBack(t *testing.T) {
	var unknown []byte
	unknown = protowire.AppendTag(unknown, 99, protowire.VarintType)
	unknown = protowire.AppendVarint(unknown, 7)
	merged := protowire.AppendTag(nil, 1, protowire.BytesType)
	stored := protowire.AppendTag(nil, 2, protowire.BytesType)
	stored = protowire.AppendBytes(stored, protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), []byte("a")))
	stored = protowire.AppendTag(stored, 2, protowire.BytesType)
	stored = protowire.AppendBytes(stored, protowire.AppendBytes(protowire.AppendTag(nil, 3, protowire.BytesType), []byte("v")))
	merged = protowire.AppendBytes(merged, stored)
	badText := protowire.AppendTag(nil, 2, protowire.BytesType)
	badText = protowire.AppendBytes(badText, protowire.AppendBytes(protowire.AppendTag(nil, 3, protowire.BytesType), []byte{0xff}))
	for name, wire := range map[string][]byte{"unknown_field": unknown, "message_twice": merged, "reason_not_utf8": badText, "truncated": {0x0a, 0x05, 1}} {
		t.Run(name, func(t *testing.T) {
			if decodePageFast(bytes.Clone(wire), &Page{}, &messageSlabs{}) {
				t.Fatal("the fast decoder took it")
			}
			sameAsProto(t, wire)
		})
	}
}

// sameAsProto fails unless decodePage and proto.Unmarshal agree on wire:
// both fail, or both give equal pages with the same unknown fields.
func sameAsProto(t *testing.T, wire []byte) {
	t.Helper()
	want := &Page{}
	wantErr := proto.Unmarshal(wire, want)
	got, err := decodePage(pooled(wire))
	if (err != nil) != (wantErr != nil) {
		t.Fatalf("decodePage: %v; proto.Unmarshal: %v", err, wantErr)
	}
	if err == nil && !proto.Equal(got, want) {
		t.Fatalf("decodePage gave %v, proto.Unmarshal %v", got, want)
	}
}

// FuzzDecodePage: whatever the bytes, decodePage agrees with
// proto.Unmarshal, and so does a borrowing decoder reused after a full
// page (nothing of the page before is left in the next).
func FuzzDecodePage(f *testing.F) {
	wire, err := proto.Marshal(samplePage())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(wire)
	f.Add(wire[:len(wire)/2])
	f.Add([]byte{})
	f.Add([]byte{0x0a, 0x00, 0x12, 0x00, 0x18, 0x01})
	f.Fuzz(func(t *testing.T, frame []byte) {
		sameAsProto(t, frame)
		d := pageDecoder{borrow: true}
		defer d.release()
		borrowedSameAsProto(t, &d, wire)
		borrowedSameAsProto(t, &d, frame)
	})
}

// countingPool is a mem.BufferPool that counts the buffers put back.
type countingPool struct{ put int }

func (p *countingPool) Get(n int) *[]byte {
	b := make([]byte, n)
	return &b
}

func (p *countingPool) Put(*[]byte) { p.put++ }

func pooledBy(pool *countingPool, wire []byte) mem.Buffer {
	b := pool.Get(len(wire))
	copy(*b, wire)
	return mem.NewBuffer(b, pool)
}

// borrowedSameAsProto fails unless d decodes wire as proto.Unmarshal does.
func borrowedSameAsProto(t *testing.T, d *pageDecoder, wire []byte) {
	t.Helper()
	want := &Page{}
	wantErr := proto.Unmarshal(wire, want)
	got, err := d.decode(pooled(wire))
	if (err != nil) != (wantErr != nil) {
		t.Fatalf("borrowing decode: %v; proto.Unmarshal: %v", err, wantErr)
	}
	if err == nil && !proto.Equal(got, want) {
		t.Fatalf("borrowing decode gave %v, proto.Unmarshal %v", got, want)
	}
}

// TestBorrowingDecoderReusesAndFrees: a borrowing decoder's pages equal
// proto.Unmarshal's frame after frame, with more messages than a slab and
// then fewer, fields set and then absent; it aliases each frame until the
// next one, and gives every frame back to its pool.
func TestBorrowingDecoderReusesAndFrees(t *testing.T) {
	big := &Page{NextOffset: 700}
	for i := range 600 {
		big.Messages = append(big.Messages, &orderlogpb.StoredMessage{Offset: uint64(i), ProducerId: 9, ProducerSeq: uint64(i), IngestTimeUs: 5,
			Message: &orderlogpb.Message{Topic: "t", Key: []byte("k"), Value: []byte("value"), MessageId: []byte("id"),
				Headers: []*orderlogpb.Header{{Key: "h", Value: []byte("v")}}}})
	}
	// gRPC pools buffers of 1 KiB and more: every frame here is at least that.
	small := &Page{Messages: []*orderlogpb.StoredMessage{{Offset: 3}, {Offset: 4, Message: &orderlogpb.Message{Value: make([]byte, 2000)}}}}
	skips := &Page{Skipped: []*orderlogpb.SkippedRange{{First: 1, End: 2, Reason: string(make([]byte, 2000))}}}
	frames := []*Page{big, samplePage(), small, big, skips}
	pool := &countingPool{}
	d := pageDecoder{borrow: true}
	for i, want := range frames {
		wire, err := proto.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		got, err := d.decode(pooledBy(pool, wire))
		if err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(got, want) {
			t.Fatalf("frame %d: decoded %v\nwant %v", i, got, want)
		}
		if pool.put != i {
			t.Fatalf("frame %d: %d frames freed, want %d (every one before it)", i, pool.put, i)
		}
	}
	d.release()
	if pool.put != len(frames) {
		t.Fatalf("%d frames freed after release, want %d", pool.put, len(frames))
	}
}

// TestDecodeFieldNumbers: the numbers decodePageFast reads are
// orderlog.proto's.
func TestDecodeFieldNumbers(t *testing.T) {
	check := func(m proto.Message, name protoreflect.Name, kind protoreflect.Kind, want protowire.Number) {
		t.Helper()
		fd := m.ProtoReflect().Descriptor().Fields().ByName(name)
		if fd == nil || fd.Number() != want || fd.Kind() != kind {
			t.Errorf("%T.%s: %v, decoded as number %d of kind %v", m, name, fd, want, kind)
		}
	}
	check(&Page{}, "messages", protoreflect.MessageKind, pageMessages)
	check(&Page{}, "skipped", protoreflect.MessageKind, pageSkipped)
	check(&Page{}, "next_offset", protoreflect.Uint64Kind, pageNextOffset)
	check(&Page{}, "committed", protoreflect.Uint64Kind, pageCommitted)
	s := &orderlogpb.StoredMessage{}
	check(s, "offset", protoreflect.Uint64Kind, storedOffset)
	check(s, "message", protoreflect.MessageKind, storedMessage)
	check(s, "producer_id", protoreflect.Uint64Kind, storedProducerID)
	check(s, "producer_seq", protoreflect.Uint64Kind, storedProducerSeq)
	check(s, "ingest_time_us", protoreflect.Int64Kind, storedIngestUs)
	m := &orderlogpb.Message{}
	check(m, "topic", protoreflect.StringKind, messageTopic)
	check(m, "key", protoreflect.BytesKind, messageKey)
	check(m, "value", protoreflect.BytesKind, messageValue)
	check(m, "headers", protoreflect.MessageKind, messageHeaders)
	check(m, "client_time_us", protoreflect.Int64Kind, messageClientUs)
	check(m, "message_id", protoreflect.BytesKind, messageID)
	check(&orderlogpb.Header{}, "key", protoreflect.StringKind, headerKey)
	check(&orderlogpb.Header{}, "value", protoreflect.BytesKind, headerValue)
	r := &orderlogpb.SkippedRange{}
	check(r, "first", protoreflect.Uint64Kind, skippedFirst)
	check(r, "end", protoreflect.Uint64Kind, skippedEnd)
	check(r, "reason", protoreflect.StringKind, skippedReason)
}

// poisoningPool is a mem.BufferPool that overwrites every buffer put back,
// so a page read after its frame was freed shows it.
type poisoningPool struct{ put int }

func (p *poisoningPool) Get(n int) *[]byte {
	b := make([]byte, n)
	return &b
}

func (p *poisoningPool) Put(b *[]byte) {
	p.put++
	for i := range *b {
		(*b)[i] = 0xee
	}
}

// fakePages is a pageStream of frames from a poisoningPool, then err.
type fakePages struct {
	pool   *poisoningPool
	frames [][]byte
	err    error
}

func (s *fakePages) RecvMsg(m any) error {
	if len(s.frames) == 0 {
		return s.err
	}
	b := s.pool.Get(len(s.frames[0]))
	copy(*b, s.frames[0])
	s.frames = s.frames[1:]
	m.(*grpcopt.Raw).Buf = mem.NewBuffer(b, s.pool)
	return nil
}

// TestBorrowedDrainFreesEachFrameAfterFn: fn sees every page whole (no
// frame is freed before fn returns), a frame the fast decoder refuses is
// decoded by proto.Unmarshal, and every frame goes back to the pool exactly
// once whether the stream ends, fails, or fn fails.
func TestBorrowedDrainFreesEachFrameAfterFn(t *testing.T) {
	sample, err := proto.Marshal(samplePage())
	if err != nil {
		t.Fatal(err)
	}
	// A frame with a field the fast decoder does not know, and a
	// value long enough to be pooled: proto.Unmarshal decodes it.
	unknown := protowire.AppendVarint(protowire.AppendTag(bytes.Clone(sample), 99, protowire.VarintType), 7)
	frames := [][]byte{sample, unknown, sample}
	for _, c := range []struct {
		name    string
		end     error
		fnFails int // the frame fn fails at (-1: none)
		want    error
	}{
		{"the stream ends", io.EOF, -1, nil},
		{"the stream fails", status.Error(codes.Unavailable, "gone"), -1, nil},
		{"fn fails", io.EOF, 1, errors.New("fn failed")},
	} {
		t.Run(c.name, func(t *testing.T) {
			pool := &poisoningPool{}
			stream := &fakePages{pool: pool, frames: slices.Clone(frames), err: c.end}
			seen := 0
			err := drain(stream, true, func(p *Page) error {
				want := &Page{}
				if err := proto.Unmarshal(frames[seen], want); err != nil {
					t.Fatal(err)
				}
				if !proto.Equal(p, want) {
					t.Fatalf("frame %d: fn saw %v, want %v", seen, p, want)
				}
				if seen++; seen-1 == c.fnFails {
					return c.want
				}
				return nil
			})
			switch {
			case c.want != nil && !errors.Is(err, c.want):
				t.Fatalf("drain: %v, want fn's error", err)
			case c.want == nil && c.end != io.EOF && err == nil:
				t.Fatal("drain hid the stream's failure")
			case c.want == nil && c.end == io.EOF && err != nil:
				t.Fatal(err)
			}
			if pool.put != seen {
				t.Fatalf("%d frames freed, %d received", pool.put, seen)
			}
		})
	}
}
