package groupcommit

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/proto"

	"orderlog/proto/orderlogpb"
)

func TestACommitRoundTripsAsTheSameBytes(t *testing.T) {
	c := &orderlogpb.GroupCommit{Group: "g", MemberId: "m-1", Generation: 7, Offsets: []*orderlogpb.PartitionOffset{
		{Topic: "in", Partition: 3, Offset: 12345}, {Topic: "in", Partition: 0, Offset: 1}}}
	value := Encode(c)
	if !bytes.Equal(value, Encode(proto.Clone(c).(*orderlogpb.GroupCommit))) {
		t.Fatal("the same commit encodes to different bytes")
	}
	m := &orderlogpb.Message{Headers: []*orderlogpb.Header{{Key: "x", Value: []byte("y")}, {Key: Header, Value: value}}}
	back, ok, err := Find(m)
	if err != nil || !ok || !proto.Equal(back, c) {
		t.Fatalf("Find = %v, %v, %v; want %v", back, ok, err, c)
	}
	if _, ok, err := Find(&orderlogpb.Message{}); ok || err != nil {
		t.Fatal("a message without the header has a commit")
	}
	if _, _, err := Find(&orderlogpb.Message{Headers: []*orderlogpb.Header{{Key: Header, Value: []byte("{")}}}); err == nil {
		t.Fatal("a broken header decodes")
	}
}
