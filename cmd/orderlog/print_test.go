package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"testing"

	"orderlog/client"
	"orderlog/proto/orderlogpb"
)

// TestPrintedMessagesKeepEveryByte: what read and tail print decodes back
// to the stored value, key, headers and message id, UTF-8 or not (bytes
// that were not UTF-8 came out as U+FFFD, and headers and ids not at all).
func TestPrintedMessagesKeepEveryByte(t *testing.T) {
	notUTF8 := []byte{'a', 0xff, 'b'}
	stored := &orderlogpb.Message{Topic: "t", Key: notUTF8, Value: notUTF8, MessageId: notUTF8,
		Headers: []*orderlogpb.Header{{Key: "bin", Value: notUTF8}, {Key: "text", Value: []byte("<ok>")}}}
	var out bytes.Buffer
	if err := printPage(json.NewEncoder(&out), &client.Page{Messages: []*orderlogpb.StoredMessage{{Offset: 7, Message: stored}}}); err != nil {
		t.Fatal(err)
	}
	var got printedMessage
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	decode := func(s string) []byte {
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	if got.Value != nil || !bytes.Equal(decode(got.ValueBase64), notUTF8) || !bytes.Equal(decode(got.KeyBase64), notUTF8) ||
		!bytes.Equal(decode(got.MessageIDBase64), notUTF8) {
		t.Fatalf("printed %s", out.Bytes())
	}
	if len(got.Headers) != 2 || !bytes.Equal(decode(got.Headers[0].ValueBase64), notUTF8) || got.Headers[1].Value == nil || *got.Headers[1].Value != "<ok>" {
		t.Fatalf("printed headers %s", out.Bytes())
	}
}
