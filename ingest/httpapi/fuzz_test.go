package httpapi

import (
	"net/http"
	"testing"

	"orderlog/internal/apierr"
)

// FuzzDecodeProduce: no body or header makes decoding panic; every refusal
// carries a catalogued client code; every acceptance respects the limits.
func FuzzDecodeProduce(f *testing.F) {
	f.Add(`{"topic":"t","payload":{"a":1}}`, "", "", "")
	f.Add(`[{"topic":"t","payload_base64":"AAEC"},{"topic":"u","payload":"x"}]`, "7", "1", "0")
	f.Add(`{"topic":"t","payload":1} {}`, "", "", "")
	f.Add(`[`, "x", "", "")
	f.Add(`{"topic":"","payload":null}`, "1", "1", "18446744073709551616")
	limits := DefaultLimits
	limits.MaxMessageBytes = 64
	limits.MaxBatch = 8
	f.Fuzz(func(t *testing.T, body, id, epoch, seq string) {
		header := http.Header{}
		for name, value := range map[string]string{"Producer-Id": id, "Producer-Epoch": epoch, "Producer-Seq": seq} {
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
		if n := len(call.Request.Messages); n == 0 || n > limits.MaxBatch {
			t.Fatalf("accepted %d messages", n)
		}
		for _, msg := range call.Request.Messages {
			if len(msg.Value) > limits.MaxMessageBytes || ValidateTopicName(msg.Topic) != nil {
				t.Fatalf("accepted %+v", msg)
			}
		}
	})
}
