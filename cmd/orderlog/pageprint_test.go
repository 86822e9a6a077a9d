package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"orderlog/client"
	"orderlog/proto/orderlogpb"
)

// printedBothWays prints page with pagePrinter and with printPage (the
// encoding/json reference) and fails unless the bytes are the same.
func printedBothWays(t *testing.T, page *client.Page) {
	t.Helper()
	var want, got bytes.Buffer
	if err := printPage(json.NewEncoder(&want), page); err != nil {
		t.Fatal(err)
	}
	if err := newPagePrinter(&got).print(page); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Fatalf("pagePrinter printed\n%s\nencoding/json printed\n%s", got.Bytes(), want.Bytes())
	}
}

// TestPagePrinterMatchesEncodingJSON: read and tail print byte for byte
// what encoding/json prints for the same page: escapes (HTML, control
// bytes, U+2028, bytes that are not UTF-8), fields left out when empty,
// base64 for bytes that are not UTF-8, holes with and without a reason
// between and after the messages.
func TestPagePrinterMatchesEncodingJSON(t *testing.T) {
	notUTF8 := []byte{'a', 0xff, 'b'}
	messages := map[string]*orderlogpb.StoredMessage{
		"plain":         {Offset: 3, Message: &orderlogpb.Message{Topic: "t", Value: []byte("hello")}, IngestTimeUs: 1764750000123456},
		"empty":         {Offset: 4, Message: &orderlogpb.Message{}},
		"nil_message":   {Offset: 5},
		"producer_seq0": {Offset: 6, Message: &orderlogpb.Message{Topic: "t", Key: []byte("k")}, ProducerId: 9, ProducerSeq: 0},
		"escapes": {Offset: 7, Message: &orderlogpb.Message{Topic: "a<b>&\"c\"\\", Key: []byte("\b\f\n\r\t\x00\x1f\x7f"),
			Value: []byte("line\u2028sep\u2029 é 😀 <script>"), MessageId: []byte("id&")}},
		"not_utf8": {Offset: 8, Message: &orderlogpb.Message{Topic: "bad\xffutf8", Key: notUTF8, Value: notUTF8, MessageId: notUTF8,
			Headers: []*orderlogpb.Header{{Key: "bin", Value: notUTF8}, {Key: "text", Value: []byte("<ok>")}, {Key: "", Value: nil}}}},
		"everything": {Offset: 1 << 60, Message: &orderlogpb.Message{Topic: "orders", Key: []byte("customer-1"), Value: []byte(`{"qty":1}`),
			Headers: []*orderlogpb.Header{{Key: "content-type", Value: []byte("application/json")}}, ClientTimeUs: -5, MessageId: []byte("m1")},
			ProducerId: 1<<64 - 1, ProducerSeq: 12345, IngestTimeUs: -1},
	}
	// Long values: the escapes at every position of the eight-byte words
	// verbatimRun reads.
	for _, special := range []string{"\"", "\\", "<", ">", "&", "\x00", "\x1f", "\x7f", "\n", "é", "\u2028", "\xff"} {
		long := []byte(strings.Repeat("abcdefgh", 12))
		for _, at := range []int{0, 7, 8, 15, 33, 94} {
			long = append(long[:at:at], append([]byte(special), long[at:]...)...)
		}
		messages["long_"+special] = &orderlogpb.StoredMessage{Offset: 9, Message: &orderlogpb.Message{Topic: string(long), Value: long}}
	}
	for name, m := range messages {
		t.Run(name, func(t *testing.T) {
			printedBothWays(t, &client.Page{Messages: []*orderlogpb.StoredMessage{m}})
		})
	}
	t.Run("holes", func(t *testing.T) {
		printedBothWays(t, &client.Page{
			Messages: []*orderlogpb.StoredMessage{messages["plain"], messages["producer_seq0"]},
			Skipped:  []*orderlogpb.SkippedRange{{First: 0, End: 3}, {First: 5, End: 6, Reason: "compacted"}, {First: 10, End: 12, Reason: "<&>"}},
		})
	})
	t.Run("empty_page", func(t *testing.T) { printedBothWays(t, &client.Page{}) })
}

// FuzzPagePrinter: any topic, key, value, header and id bytes print as
// encoding/json prints them.
func FuzzPagePrinter(f *testing.F) {
	f.Add("t", []byte("k"), []byte("v"), "h", []byte("hv"), []byte("id"), uint64(1), int64(0))
	f.Add("a<b>", []byte{0xff}, []byte("\u2028\x00"), "", []byte{}, []byte{0xc3}, uint64(0), int64(-1))
	f.Fuzz(func(t *testing.T, topic string, key, value []byte, headerKey string, headerValue, id []byte, producer uint64, ingest int64) {
		m := &orderlogpb.StoredMessage{Offset: 1, ProducerId: producer, ProducerSeq: producer / 2, IngestTimeUs: ingest % (1 << 50),
			Message: &orderlogpb.Message{Topic: topic, Key: key, Value: value, MessageId: id, ClientTimeUs: ingest,
				Headers: []*orderlogpb.Header{{Key: headerKey, Value: headerValue}}}}
		printedBothWays(t, &client.Page{Messages: []*orderlogpb.StoredMessage{m}})
	})
}
