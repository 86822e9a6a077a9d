package httpapi

import (
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

	"orderlog/internal/apierr"
	"orderlog/internal/partition"
)

// FuzzDecodeProduce: no body or header makes decoding panic; every refusal
// carries a catalogued client code; every acceptance respects the limits:
// a body of UTF-8 only, a topic for every message, a bounded key.
func FuzzDecodeProduce(f *testing.F) {
	f.Add(`{"topic":"t","payload":{"a":1}}`, "", "", "", "")
	f.Add(`[{"topic":"t","payload_base64":"AAEC"},{"topic":"u","payload":"x"}]`, "7", "1", "0", "")
	f.Add(`{"topic":"t","payload":1} {}`, "", "", "", "")
	f.Add(`[`, "x", "", "", "")
	f.Add(`{"topic":"","payload":null}`, "1", "1", "18446744073709551616", "")
	f.Add(`{"key":"user-42","payload":{"n":1}}`, "", "", "", "order-17") // the specified body: no topic
	f.Add("{\"payload\":\"\xff\xfe\"}", "", "", "", "")                  // not UTF-8: encoding/json would store U+FFFD
	f.Add("[{\"payload\":1},{\"key\":\"\xed\xa0\x80\",\"payload\":2}]", "", "", "", "")
	f.Add(`{"payload":1}`, "", "", "", strings.Repeat("k", MaxIdempotencyKeyBytes+1))
	f.Add(`{"payload":1}`, "", "", "", `"a \"quoted\" key"`)
	f.Add(`{"payload":1}`, "", "", "", "caf\xc3\xa9")
	limits := DefaultLimits
	limits.MaxMessageBytes = 64
	limits.MaxBatch = 8
	f.Fuzz(func(t *testing.T, body, id, epoch, seq, key string) {
		header := http.Header{}
		for name, value := range map[string]string{"Producer-Id": id, "Producer-Epoch": epoch, "Producer-Seq": seq, "Idempotency-Key": key} {
			if value != "" {
				header.Set(name, value)
			}
		}
		call, err := DecodeProduce(header, []byte(body), limits)
		if err != nil {
			apiErr := apierr.As(err)
			if apiErr.Class() != apierr.ClassClient {
				t.Fatalf("refusal %v is not a client error", err)
			}
			return
		}
		if !utf8.ValidString(body) {
			t.Fatalf("accepted a body that is not UTF-8: %q", body)
		}
		if n := len(call.Request.Messages); n == 0 || n > limits.MaxBatch {
			t.Fatalf("accepted %d messages", n)
		}
		if len(call.Request.IdempotencyKey) > MaxIdempotencyKeyBytes {
			t.Fatalf("accepted a key of %d bytes", len(call.Request.IdempotencyKey))
		}
		for _, msg := range call.Request.Messages {
			if len(msg.Value) > limits.MaxMessageBytes || ValidateTopicName(msg.Topic) != nil {
				t.Fatalf("accepted %+v", msg)
			}
		}
	})
}

// FuzzDecodeNames: the bodies of POST /v1/producers and POST /v1/topics
// never panic, are refused with client codes, and what is accepted is
// UTF-8 within the documented limits.
func FuzzDecodeNames(f *testing.F) {
	f.Add(`{"name":"web"}`)
	f.Add(`{"name":"` + strings.Repeat("n", 100<<10) + `"}`) // a 100 KB producer name
	f.Add(`{"name":"` + strings.Repeat("n", MaxProducerNameBytes+1) + `"}`)
	f.Add("{\"name\":\"\xff\xfe\"}")
	f.Add(`{"name":"orders","partitions":16}`)
	f.Add(`{"name":"orders","partitions":1025}`)
	f.Add(`{"name":"orders","partitions":-1,"cleanup_policy":"compact"}`)
	f.Fuzz(func(t *testing.T, body string) {
		if req, err := DecodeInitProducer([]byte(body)); err != nil {
			if apierr.As(err).Class() != apierr.ClassClient {
				t.Fatalf("refusal %v is not a client error", err)
			}
		} else if !utf8.ValidString(body) || req.Name == "" || len(req.Name) > MaxProducerNameBytes {
			t.Fatalf("accepted producer %q", req.Name)
		}
		if req, err := DecodeCreateTopic([]byte(body)); err != nil {
			if apierr.As(err).Class() != apierr.ClassClient {
				t.Fatalf("refusal %v is not a client error", err)
			}
		} else if !utf8.ValidString(body) || ValidateTopicName(req.Name) != nil || req.Partitions > partition.Max {
			t.Fatalf("accepted topic %+v", req)
		}
	})
}
