package grpcopt

import (
	"fmt"
	"sync"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"

	"orderlog/proto/orderlogpb"
	"orderlog/proto/producewire"
)

// codec is gRPC's protobuf codec on sharedPool, with hand-written encoders
// for the produce stream and the read streams' pages. gRPC's own codec
// takes its marshal and reassembly buffers from the default pool, whatever
// pool the connection was given.
//
// The codec is never registered with gRPC's process-wide registry: orderlog's
// servers and connections select it through ServerOptions and DialOptions
// (grpc.ForceServerCodecV2, grpc.ForceCodecV2), and every other gRPC user in
// a process that imports orderlog's client keeps gRPC's own "proto" codec.
type codec struct{}

// Name is the content-subtype orderlog's clients send, "proto"
// ("application/grpc+proto"): the bytes are standard protobuf, so they talk
// to any protobuf server, and a server with the forced codec decodes a
// standard client's requests (grpcurl's, or a client with gRPC's own codec)
// whatever content-subtype they name.
func (codec) Name() string { return "proto" }

func (codec) Marshal(v any) (mem.BufferSlice, error) {
	// The produce stream's messages and the read streams' pages have
	// hand-written encoders with the same output (see producewire).
	switch m := v.(type) {
	case *orderlogpb.ProduceRequest:
		return marshalInto(producewire.ProduceRequestSize(m), func(b []byte) ([]byte, error) {
			return producewire.AppendProduceRequest(b, m)
		})
	case *orderlogpb.ProduceResponse:
		return marshalInto(producewire.ProduceResponseSize(m), func(b []byte) ([]byte, error) {
			return producewire.AppendProduceResponse(b, m)
		})
	case *orderlogpb.ReadResponse:
		e := readEncoders.Get().(*producewire.ReadEncoder)
		defer readEncoders.Put(e)
		size, err := e.Size(m)
		if err != nil {
			return nil, err
		}
		return marshalInto(size, func(b []byte) ([]byte, error) { return e.Append(b, m), nil })
	}
	m := messageOf(v)
	if m == nil {
		return nil, fmt.Errorf("grpcopt: cannot marshal %T, not a proto.Message", v)
	}
	// UseCachedSize is safe right after Size on a message nobody mutates.
	opts := proto.MarshalOptions{UseCachedSize: true}
	return marshalInto(proto.Size(m), func(b []byte) ([]byte, error) { return opts.MarshalAppend(b, m) })
}

// readEncoders keeps the read pages' encoders, whose scratch grows to a
// page's message count.
var readEncoders = sync.Pool{New: func() any { return new(producewire.ReadEncoder) }}

// marshalInto encodes a message of size bytes with appendTo into a buffer
// of that capacity, pooled unless it is small.
func marshalInto(size int, appendTo func([]byte) ([]byte, error)) (mem.BufferSlice, error) {
	if mem.IsBelowBufferPoolingThreshold(size) {
		buf, err := appendTo(make([]byte, 0, size))
		if err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(buf)}, nil
	}
	buf := sharedPool.Get(size)
	out, err := appendTo((*buf)[:0]) // fills *buf: its capacity is size
	if err == nil && len(out) != size {
		// An encoder and its size disagree: sending the buffer would
		// send stale pool bytes or a frame cut short.
		err = fmt.Errorf("grpcopt: encoded %d bytes of a message sized %d", len(out), size)
	}
	if err != nil {
		sharedPool.Put(buf)
		return nil, err
	}
	return mem.BufferSlice{mem.NewBuffer(buf, sharedPool)}, nil
}

// Raw receives a message undecoded: RecvMsg(&raw) leaves the message's
// bytes in Buf, one buffer the receiver owns and must Free exactly once,
// after nothing refers to them any more. A decoder that aliases the buffer
// (instead of copying bytes fields, as proto.Unmarshal does) keeps the
// payloads where they arrived.
type Raw struct{ Buf mem.Buffer }

func (codec) Unmarshal(data mem.BufferSlice, v any) error {
	if raw, ok := v.(*Raw); ok {
		raw.Buf = data.MaterializeToBuffer(sharedPool) // a reference of its own: gRPC frees data
		return nil
	}
	buf := data.MaterializeToBuffer(sharedPool)
	defer buf.Free()
	if resp, ok := v.(*orderlogpb.ProduceResponse); ok {
		return producewire.DecodeProduceResponse(buf.ReadOnlyData(), resp) // copies what it keeps
	}
	m := messageOf(v)
	if m == nil {
		return fmt.Errorf("grpcopt: cannot unmarshal into %T, not a proto.Message", v)
	}
	// proto.Unmarshal copies bytes fields, so nothing keeps the buffer.
	return proto.Unmarshal(buf.ReadOnlyData(), m)
}

func messageOf(v any) proto.Message {
	switch v := v.(type) {
	case protoadapt.MessageV1:
		return protoadapt.MessageV2Of(v)
	case protoadapt.MessageV2:
		return v
	}
	return nil
}
