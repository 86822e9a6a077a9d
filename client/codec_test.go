package client_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"

	"orderlog/client"
	"orderlog/internal/node"
	"orderlog/proto/orderlogpb"
)

// Importing orderlog's client (and, in this test binary, a whole node)
// leaves gRPC's process-wide "proto" codec alone: every other gRPC user of
// the program keeps gRPC's own codec.
func TestImportingClientKeepsGRPCsProtoCodec(t *testing.T) {
	got := encoding.GetCodecV2("proto")
	typ := reflect.TypeOf(got)
	if typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	if typ.PkgPath() != "google.golang.org/grpc/encoding/proto" {
		t.Fatalf(`the process-wide "proto" codec is %T from %q, not gRPC's own`, got, typ.PkgPath())
	}
}

// A standard gRPC client, with gRPC's default codec and nothing of
// orderlog's options (as grpcurl or any generated client in another
// program), reaches a real node: Status, CreateTopic, InitProducer and a
// produce frame, which the node receives with orderlog's codec. Then
// orderlog's client reads the message back.
func TestStandardGRPCClientAgainstANode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := node.Start(node.Config{DataDir: t.TempDir(), GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(s.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	admin := orderlogpb.NewAdminClient(conn)
	if _, err := admin.Status(ctx, &orderlogpb.StatusRequest{}); err != nil {
		t.Fatalf("Status from a default-codec client: %v", err)
	}
	if _, err := admin.CreateTopic(ctx, &orderlogpb.CreateTopicRequest{Name: "t"}); err != nil {
		t.Fatalf("CreateTopic: %v", err)
	}
	producer := orderlogpb.NewProducerClient(conn)
	init, err := producer.InitProducer(ctx, &orderlogpb.InitProducerRequest{Name: "standard-client"})
	if err != nil {
		t.Fatalf("InitProducer: %v", err)
	}
	stream, err := producer.Produce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	req := &orderlogpb.ProduceRequest{ProducerId: init.ProducerId, Epoch: init.Epoch, FirstSeq: init.NextSeq, RequestId: 1,
		Messages: []*orderlogpb.Message{{Topic: "t", Key: []byte("k"), Value: []byte("from a standard client")}}}
	if err := stream.Send(req); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatalf("Produce: %v", err)
	}
	if resp.ErrorCode != "" || len(resp.Acks) != 1 {
		t.Fatalf("Produce answered %v", resp)
	}
	stream.CloseSend()

	c, err := client.Dial(s.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	offset := resp.Acks[0].Offset
	if err := c.WaitCommitted(ctx, offset+1); err != nil {
		t.Fatal(err)
	}
	var got []*orderlogpb.StoredMessage
	err = c.Read(ctx, offset, 1, func(p *client.Page) error {
		got = append(got, p.Messages...)
		return nil
	})
	if err != nil || len(got) != 1 || string(got[0].Message.Value) != "from a standard client" {
		t.Fatalf("read back %v, %v", got, err)
	}
}
