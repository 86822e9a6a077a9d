package grpcopt

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"reflect"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/protobuf/proto"

	"orderlog/proto/orderlogpb"
	"orderlog/proto/producewire"
)

// grpcProtoCodecPackage is where gRPC's own protobuf codec lives.
const grpcProtoCodecPackage = "google.golang.org/grpc/encoding/proto"

// Importing grpcopt leaves gRPC's process-wide "proto" codec alone.
func TestProcessWideProtoCodecIsGRPCs(t *testing.T) {
	got := encoding.GetCodecV2("proto")
	if _, ok := got.(codec); ok {
		t.Fatal(`grpcopt's codec is registered as the process-wide "proto" codec`)
	}
	typ := reflect.TypeOf(got)
	if typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	if pkg := typ.PkgPath(); pkg != grpcProtoCodecPackage {
		t.Fatalf(`the process-wide "proto" codec is %T from %q, want gRPC's own`, got, pkg)
	}
}

// fakeNode answers Produce the way ingest does, receiving each request
// undecoded (Raw, which only orderlog's codec fills) and decoding it with
// producewire; Status answers a fixed epoch.
type fakeNode struct {
	orderlogpb.UnimplementedProducerServer
	orderlogpb.UnimplementedAdminServer
}

func (fakeNode) Status(context.Context, *orderlogpb.StatusRequest) (*orderlogpb.StatusResponse, error) {
	return &orderlogpb.StatusResponse{Epoch: 42, Version: "test"}, nil
}

func (fakeNode) Produce(stream grpc.BidiStreamingServer[orderlogpb.ProduceRequest, orderlogpb.ProduceResponse]) error {
	for {
		var raw Raw
		if err := stream.RecvMsg(&raw); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return err
		}
		req, err := producewire.DecodeProduceRequest(raw.Buf.ReadOnlyData())
		if err != nil {
			raw.Buf.Free()
			return err
		}
		resp := &orderlogpb.ProduceResponse{RequestId: req.RequestId}
		for i := range req.Messages {
			resp.Acks = append(resp.Acks, &orderlogpb.Ack{Offset: req.FirstSeq + uint64(i)})
		}
		raw.Buf.Free()
		if err := stream.Send(resp); err != nil {
			return err
		}
	}
}

// serveFakeNode serves a fakeNode with ServerOptions on a loopback port.
func serveFakeNode(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(ServerOptions()...)
	orderlogpb.RegisterProducerServer(srv, fakeNode{})
	orderlogpb.RegisterAdminServer(srv, fakeNode{})
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

func dialFor(t *testing.T, addr string, options ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, options...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// An orderlog server answers orderlog's clients and standard protobuf
// clients alike: one with gRPC's default codec and no content-subtype
// ("application/grpc", as grpcurl sends), and one naming "+proto".
func TestServerAnswersStandardAndOrderlogClients(t *testing.T) {
	addr := serveFakeNode(t)
	plain := grpc.WithTransportCredentials(insecure.NewCredentials())
	clients := map[string][]grpc.DialOption{
		"orderlog":         DialOptions(),
		"grpc_default":     {plain},
		"grpc_proto_named": {plain, grpc.WithDefaultCallOptions(grpc.CallContentSubtype("proto"))},
	}
	for name, options := range clients {
		t.Run(name, func(t *testing.T) {
			ctx := testContext(t)
			conn := dialFor(t, addr, options...)
			status, err := orderlogpb.NewAdminClient(conn).Status(ctx, &orderlogpb.StatusRequest{})
			if err != nil || status.Epoch != 42 || status.Version != "test" {
				t.Fatalf("Status: %v, %v", status, err)
			}
			stream, err := orderlogpb.NewProducerClient(conn).Produce(ctx)
			if err != nil {
				t.Fatal(err)
			}
			req := &orderlogpb.ProduceRequest{ProducerId: 1, Epoch: 1, FirstSeq: 10, RequestId: 7, Messages: []*orderlogpb.Message{
				{Topic: "t", Value: []byte("a")}, {Topic: "t", Key: []byte("k"), Value: make([]byte, 100<<10)},
			}}
			if err := stream.Send(req); err != nil {
				t.Fatal(err)
			}
			resp, err := stream.Recv()
			if err != nil {
				t.Fatalf("Produce: %v", err)
			}
			if resp.RequestId != 7 || len(resp.Acks) != 2 || resp.Acks[1].Offset != 11 {
				t.Fatalf("Produce answered %v", resp)
			}
		})
	}
}

// Connections made with DialOptions use orderlog's codec on every call: a
// client stream can receive Raw, which gRPC's own codec refuses.
func TestDialOptionsSelectTheCodec(t *testing.T) {
	addr := serveFakeNode(t)
	ctx := testContext(t)
	conn := dialFor(t, addr, DialOptions()...)
	desc := &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}
	stream, err := conn.NewStream(ctx, desc, "/"+orderlogpb.Producer_ServiceDesc.ServiceName+"/Produce")
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.SendMsg(&orderlogpb.ProduceRequest{RequestId: 3, Messages: []*orderlogpb.Message{{Topic: "t"}}}); err != nil {
		t.Fatal(err)
	}
	var raw Raw
	if err := stream.RecvMsg(&raw); err != nil {
		t.Fatalf("RecvMsg(Raw) on a DialOptions connection: %v", err)
	}
	defer raw.Buf.Free()
	var resp orderlogpb.ProduceResponse
	if err := producewire.DecodeProduceResponse(raw.Buf.ReadOnlyData(), &resp); err != nil || resp.RequestId != 3 {
		t.Fatalf("decoded %v, %v", &resp, err)
	}
}

// benchFrame is a typical produce frame: 64 messages of 1 KiB (64 KiB).
func benchFrame() *orderlogpb.ProduceRequest {
	req := &orderlogpb.ProduceRequest{ProducerId: 1, Epoch: 1, FirstSeq: 1, RequestId: 1}
	for range 64 {
		req.Messages = append(req.Messages, &orderlogpb.Message{Topic: "orders", Key: []byte("key-0001"), Value: make([]byte, 1024)})
	}
	return req
}

// The produce path's encodings with orderlog's codec against gRPC's own:
// the client marshals requests, the server receives them undecoded (Raw)
// and decodes them with producewire.
func BenchmarkProduceRequestCodec(b *testing.B) {
	codecs := map[string]encoding.CodecV2{"orderlog": codec{}, "grpc": encoding.GetCodecV2("proto")}
	req := benchFrame()
	for name, c := range codecs {
		b.Run("marshal/"+name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(producewire.ProduceRequestSize(req)))
			for b.Loop() {
				data, err := c.Marshal(req)
				if err != nil {
					b.Fatal(err)
				}
				data.Free()
			}
		})
	}
	wire, err := codec{}.Marshal(req)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("receive/orderlog", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(wire.Len()))
		for b.Loop() {
			var raw Raw
			if err := (codec{}).Unmarshal(wire, &raw); err != nil {
				b.Fatal(err)
			}
			if _, err := producewire.DecodeProduceRequest(raw.Buf.ReadOnlyData()); err != nil {
				b.Fatal(err)
			}
			raw.Buf.Free()
		}
	})
	b.Run("receive/grpc", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(wire.Len()))
		for b.Loop() {
			var got orderlogpb.ProduceRequest
			if err := codecs["grpc"].Unmarshal(wire, &got); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// A produce stream over loopback, frame by frame, from a client with
// DialOptions and from one with gRPC's defaults, to the same server.
func BenchmarkProduceStreamLoopback(b *testing.B) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := grpc.NewServer(ServerOptions()...)
	orderlogpb.RegisterProducerServer(srv, fakeNode{})
	go srv.Serve(lis)
	defer srv.Stop()
	clients := map[string][]grpc.DialOption{
		"orderlog":     DialOptions(),
		"grpc_default": {grpc.WithTransportCredentials(insecure.NewCredentials())},
	}
	req := benchFrame()
	for name, options := range clients {
		b.Run(name, func(b *testing.B) {
			conn, err := grpc.NewClient(lis.Addr().String(), options...)
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			stream, err := orderlogpb.NewProducerClient(conn).Produce(context.Background())
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.SetBytes(int64(producewire.ProduceRequestSize(req)))
			for b.Loop() {
				if err := stream.Send(req); err != nil {
					b.Fatal(err)
				}
				if _, err := stream.Recv(); err != nil {
					b.Fatal(err)
				}
			}
			stream.CloseSend()
		})
	}
}

// The codec marshals read pages, small and pooled, exactly as
// proto.Marshal does.
func TestCodecMarshalsReadPagesAsProto(t *testing.T) {
	small := &orderlogpb.ReadResponse{NextOffset: 3, Messages: []*orderlogpb.StoredMessage{{Offset: 2, Message: &orderlogpb.Message{Topic: "t", Value: []byte("v")}}}}
	large := &orderlogpb.ReadResponse{NextOffset: 100, Committed: 120, Skipped: []*orderlogpb.SkippedRange{{First: 50, End: 60, Reason: "compacted"}}}
	for i := range 50 {
		large.Messages = append(large.Messages, &orderlogpb.StoredMessage{Offset: uint64(i), ProducerId: 1, ProducerSeq: uint64(i),
			Message: &orderlogpb.Message{Topic: "orders", Key: []byte("k"), Value: make([]byte, 1024)}})
	}
	for _, page := range []*orderlogpb.ReadResponse{small, large} {
		got, err := codec{}.Marshal(page)
		if err != nil {
			t.Fatal(err)
		}
		want, err := proto.Marshal(page)
		if err != nil {
			t.Fatal(err)
		}
		if b := got.Materialize(); !bytes.Equal(b, want) {
			t.Fatalf("codec marshalled %d bytes, proto.Marshal %d, not the same", len(b), len(want))
		}
		got.Free()
	}
}

// An encoder whose output disagrees with its size fails the marshal
// instead of sending stale pool bytes.
func TestMarshalIntoRefusesAWrongSize(t *testing.T) {
	const size = 64 << 10
	_, err := marshalInto(size, func(b []byte) ([]byte, error) { return append(b, make([]byte, size-1)...), nil })
	if err == nil {
		t.Fatal("an encoding one byte short of its size was marshalled")
	}
}
