package httpapi

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"orderlog/internal/apierr"
)

func codeOf(err error) apierr.Code {
	var apiErr *apierr.Error
	if errors.As(err, &apiErr) {
		return apiErr.Code
	}
	return ""
}

func TestDecodeProduceSingleAndBatch(t *testing.T) {
	limits := DefaultLimits
	call, err := DecodeProduce(http.Header{}, []byte(`{"topic":"t","key":"k","payload":{"a":[1,2]},"headers":[{"key":"h","value":"1"},{"key":"h","value":"2"}]}`), limits)
	if err != nil {
		t.Fatal(err)
	}
	msg := call.Request.Messages[0]
	if call.Batch || string(msg.Value) != `{"a":[1,2]}` || string(msg.Key) != "k" || len(msg.Headers) != 2 || string(msg.Headers[1].Value) != "2" {
		t.Fatalf("decoded %+v", call)
	}
	call, err = DecodeProduce(http.Header{"Producer-Id": {"7"}, "Producer-Epoch": {"2"}, "Producer-Seq": {"10"}},
		[]byte(` [{"topic":"t","payload_base64":"AAEC"},{"topic":"u","payload":"x"}]`), limits)
	if err != nil {
		t.Fatal(err)
	}
	r := call.Request
	if !call.Batch || len(r.Messages) != 2 || r.ProducerId != 7 || r.Epoch != 2 || r.FirstSeq != 10 || string(r.Messages[0].Value) != "\x00\x01\x02" {
		t.Fatalf("decoded %+v", r)
	}
}

// TestDecodeProduceCompactsJSONAndDecodesBinaryHeaders: a JSON payload is
// stored compact (what a read gives back as JSON), and a header value can
// come as base64.
func TestDecodeProduceCompactsJSONAndDecodesBinaryHeaders(t *testing.T) {
	call, err := DecodeProduce(http.Header{}, []byte(`{"topic":"t","payload":{ "a" : [1, 2] },"headers":[{"key":"b","value_base64":"//4="},{"key":"e"}]}`), DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	msg := call.Request.Messages[0]
	if string(msg.Value) != `{"a":[1,2]}` || string(msg.Headers[0].Value) != "\xff\xfe" || len(msg.Headers[1].Value) != 0 {
		t.Fatalf("decoded %+v", msg)
	}
}

func TestDecodeProduceRefusesBadInputWithStableCodes(t *testing.T) {
	small := DefaultLimits
	small.MaxMessageBytes = 4
	small.MaxBatch = 2
	cases := map[string]struct {
		header http.Header
		body   string
		want   apierr.Code
	}{
		"not_json":           {nil, `{"topic":`, apierr.MalformedRequest},
		"unknown_field":      {nil, `{"topic":"t","payload":1,"colour":"red"}`, apierr.MalformedRequest},
		"trailing":           {nil, `{"topic":"t","payload":1} {}`, apierr.MalformedRequest},
		"stray_brace":        {nil, `{"topic":"t","payload":1}}`, apierr.MalformedRequest},
		"stray_bracket":      {nil, `[{"topic":"t","payload":1}]]`, apierr.MalformedRequest},
		"not_json_space":     {nil, "\v{\"topic\":\"t\",\"payload\":1}", apierr.MalformedRequest},
		"no_payload":         {nil, `{"topic":"t"}`, apierr.InvalidArgument},
		"both_payloads":      {nil, `{"topic":"t","payload":1,"payload_base64":"AA=="}`, apierr.InvalidArgument},
		"bad_base64":         {nil, `{"topic":"t","payload_base64":"!!"}`, apierr.InvalidArgument},
		"both_header_values": {nil, `{"topic":"t","payload":1,"headers":[{"key":"h","value":"a","value_base64":"YQ=="}]}`, apierr.InvalidArgument},
		"bad_header_base64":  {nil, `{"topic":"t","payload":1,"headers":[{"key":"h","value_base64":"!"}]}`, apierr.InvalidArgument},
		"empty_topic_name":   {nil, `{"topic":".","payload":1}`, apierr.InvalidArgument},
		"not_utf8_payload":   {nil, "{\"payload\":\"\xff\xfe\"}", apierr.MalformedRequest},
		"not_utf8_key":       {nil, "{\"key\":\"k\xc3\",\"payload\":1}", apierr.MalformedRequest},
		"not_utf8_in_batch":  {nil, "[{\"payload\":1},{\"payload\":\"\xed\xa0\x80\"}]", apierr.MalformedRequest},
		"long_key_header":    {http.Header{"Idempotency-Key": {strings.Repeat("k", MaxIdempotencyKeyBytes+1)}}, `{"payload":1}`, apierr.InvalidArgument},
		"key_not_ascii":      {http.Header{"Idempotency-Key": {"caf\xc3\xa9"}}, `{"payload":1}`, apierr.InvalidArgument},
		"key_bad_sf_string":  {http.Header{"Idempotency-Key": {`"a"b"`}}, `{"payload":1}`, apierr.InvalidArgument},
		"bad_topic":          {nil, `{"topic":"../etc","payload":1}`, apierr.InvalidArgument},
		"too_large":          {nil, `{"topic":"t","payload":"123456"}`, apierr.MessageTooLarge},
		"empty_batch":        {nil, `[]`, apierr.InvalidArgument},
		"batch_too_large":    {nil, `[{"topic":"t","payload":1},{"topic":"t","payload":1},{"topic":"t","payload":1}]`, apierr.BatchTooLarge},
		"bad_producer_id":    {http.Header{"Producer-Id": {"x"}, "Producer-Epoch": {"1"}, "Producer-Seq": {"0"}}, `{"topic":"t","payload":1}`, apierr.InvalidArgument},
		"partial_producer":   {http.Header{"Producer-Id": {"1"}}, `{"topic":"t","payload":1}`, apierr.InvalidArgument},
		"zero_producer":      {http.Header{"Producer-Id": {"0"}, "Producer-Epoch": {"1"}, "Producer-Seq": {"0"}}, `{"topic":"t","payload":1}`, apierr.InvalidArgument},
		"key_and_producer":   {http.Header{"Idempotency-Key": {"a"}, "Producer-Id": {"1"}, "Producer-Epoch": {"1"}, "Producer-Seq": {"0"}}, `{"topic":"t","payload":1}`, apierr.InvalidArgument},
		"key_with_batch":     {http.Header{"Idempotency-Key": {"a"}}, `[{"topic":"t","payload":1},{"topic":"t","payload":2}]`, apierr.InvalidArgument},
		"negative_seq_text":  {http.Header{"Producer-Id": {"1"}, "Producer-Epoch": {"1"}, "Producer-Seq": {"-1"}}, `{"topic":"t","payload":1}`, apierr.InvalidArgument},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			header := tc.header
			if header == nil {
				header = http.Header{}
			}
			_, err := DecodeProduce(header, []byte(tc.body), small)
			if got := codeOf(err); got != tc.want {
				t.Fatalf("got %v (%s), want %s", err, got, tc.want)
			}
		})
	}
}

// A message without a topic goes to DefaultTopic.
func TestDecodeProduceDefaultsTheTopic(t *testing.T) {
	call, err := DecodeProduce(http.Header{}, []byte(`[{"key":"k","payload":1},{"topic":"t","payload":2},{"topic":"","payload":3}]`), DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{DefaultTopic, "t", DefaultTopic} {
		if got := call.Request.Messages[i].Topic; got != want {
			t.Errorf("message %d: topic %q, want %q", i, got, want)
		}
	}
}

func TestDecodeRead(t *testing.T) {
	call, err := DecodeRead(url.Values{"offset": {"42"}, "limit": {"5"}, "topic": {"t"}, "key": {"k"}}, DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	if r := call.Request; r.FromOffset != 42 || r.Limit != 5 || r.Topic != "t" || string(r.Key) != "k" {
		t.Fatalf("decoded %+v", r)
	}
	for query, want := range map[string]apierr.Code{
		"offset=-1":      apierr.InvalidArgument,
		"limit=0":        apierr.InvalidArgument,
		"limit=99999999": apierr.LimitTooLarge,
		"partition=1024": apierr.InvalidArgument,
		"partition=-1":   apierr.InvalidArgument,
		"topic=a%2Fb":    apierr.InvalidArgument,
	} {
		values, _ := url.ParseQuery(query)
		if _, err := DecodeRead(values, DefaultLimits); codeOf(err) != want {
			t.Errorf("%s: got %v, want %s", query, err, want)
		}
	}
}
