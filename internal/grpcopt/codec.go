package grpcopt

import (
	"fmt"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"
)

// codec is gRPC's protobuf codec on sharedPool. gRPC's own codec takes its
// marshal and reassembly buffers from the default pool, whatever pool the
// connection was given; registering this one under the same name ("proto")
// replaces it for the whole process.
type codec struct{}

func init() { encoding.RegisterCodecV2(codec{}) }

func (codec) Name() string { return "proto" }

func (codec) Marshal(v any) (mem.BufferSlice, error) {
	m := messageOf(v)
	if m == nil {
		return nil, fmt.Errorf("grpcopt: cannot marshal %T, not a proto.Message", v)
	}
	size := proto.Size(m)
	// UseCachedSize is safe right after Size on a message nobody mutates.
	opts := proto.MarshalOptions{UseCachedSize: true}
	if mem.IsBelowBufferPoolingThreshold(size) {
		buf, err := opts.Marshal(m)
		if err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(buf)}, nil
	}
	buf := sharedPool.Get(size)
	if _, err := opts.MarshalAppend((*buf)[:0], m); err != nil {
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
	m := messageOf(v)
	if m == nil {
		return fmt.Errorf("grpcopt: cannot unmarshal into %T, not a proto.Message", v)
	}
	buf := data.MaterializeToBuffer(sharedPool)
	defer buf.Free()
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
