package httpapi

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"orderlog/internal/apierr"
	"orderlog/proto/orderlogpb"
)

// recordingService stands in for the service layer so these tests check only
// the HTTP mapping; the real service is exercised by the end-to-end tests.
type recordingService struct {
	produced []*orderlogpb.ProduceRequest
	queries  []*orderlogpb.QueryRequest
	topics   []*orderlogpb.CreateTopicRequest
	refuse   error
}

func (s *recordingService) InitProducer(context.Context, *orderlogpb.InitProducerRequest) (*orderlogpb.InitProducerResponse, error) {
	return &orderlogpb.InitProducerResponse{ProducerId: 3, Epoch: 1}, s.refuse
}

func (s *recordingService) Produce(_ context.Context, req *orderlogpb.ProduceRequest) ([]*orderlogpb.Ack, error) {
	if s.refuse != nil {
		return nil, s.refuse
	}
	s.produced = append(s.produced, req)
	acks := make([]*orderlogpb.Ack, len(req.Messages))
	for i := range acks {
		acks[i] = &orderlogpb.Ack{Offset: uint64(100 + i)}
	}
	return acks, nil
}

func (s *recordingService) Query(_ context.Context, req *orderlogpb.QueryRequest) (*orderlogpb.ReadResponse, error) {
	s.queries = append(s.queries, req)
	return &orderlogpb.ReadResponse{
		Messages: []*orderlogpb.StoredMessage{
			{Offset: 5, Message: &orderlogpb.Message{Topic: "t", Value: []byte(`{"x":1}`)}},
			{Offset: 8, Message: &orderlogpb.Message{Topic: "t", Value: []byte{0xff, 0x00}}},
		},
		Skipped:    []*orderlogpb.SkippedRange{{First: 6, End: 8}},
		NextOffset: 9, Committed: 9,
	}, s.refuse
}

func (s *recordingService) Status(context.Context) (*orderlogpb.StatusResponse, error) {
	return &orderlogpb.StatusResponse{Epoch: 4, Committed: 9}, s.refuse
}
func (s *recordingService) CreateTopic(_ context.Context, req *orderlogpb.CreateTopicRequest) (*orderlogpb.Topic, error) {
	s.topics = append(s.topics, req)
	return &orderlogpb.Topic{Name: req.Name, Partitions: max(req.Partitions, 16)}, s.refuse
}
func (s *recordingService) ListTopics(context.Context) ([]*orderlogpb.Topic, error) {
	return []*orderlogpb.Topic{{Name: "a", Partitions: 16}, {Name: "b", Partitions: 4}}, s.refuse
}
func (s *recordingService) ListPartitions(_ context.Context, req *orderlogpb.ListPartitionsRequest) (*orderlogpb.ListPartitionsResponse, error) {
	return &orderlogpb.ListPartitionsResponse{Topic: req.Topic, Committed: 9, LogStart: 2,
		Partitions: []*orderlogpb.PartitionInfo{{Partition: 0, EndOffset: 9}, {Partition: 1, EndOffset: 9}}}, s.refuse
}
func (s *recordingService) IdempotencyWindow() (int, int) { return 1024, 64 }

func serve(t *testing.T, svc Service, method, target, body string, header http.Header) *httptest.ResponseRecorder {
	t.Helper()
	h, err := NewHandler(svc, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest(method, target, strings.NewReader(body))
	for k, v := range header {
		req.Header[k] = v
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func TestProduceAnswersOneAckPerMessageInOrder(t *testing.T) {
	svc := &recordingService{}
	rec := serve(t, svc, "POST", "/v1/messages", `[{"topic":"t","payload":1},{"topic":"t","payload":2}]`, nil)
	var acks []jsonAck
	if err := json.Unmarshal(rec.Body.Bytes(), &acks); err != nil || rec.Code != 200 {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	if len(acks) != 2 || *acks[0].Offset != 100 || *acks[1].Offset != 101 {
		t.Fatalf("acks %+v", acks)
	}
	rec = serve(t, svc, "POST", "/v1/messages", `{"topic":"t","payload":1}`, nil)
	var one jsonAck
	if err := json.Unmarshal(rec.Body.Bytes(), &one); err != nil || *one.Offset != 100 {
		t.Fatalf("single: %s", rec.Body)
	}
}

func TestBadInputNeverReachesTheServiceAndErrorsAreMapped(t *testing.T) {
	svc := &recordingService{}
	rec := serve(t, svc, "POST", "/v1/messages", `{"topic":"t"`, nil)
	if rec.Code != 400 || !strings.Contains(rec.Body.String(), `"MALFORMED_REQUEST"`) || len(svc.produced) != 0 {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	svc.refuse = apierr.New(apierr.OutOfOrderSequence, "expected 3").With("expected_seq", "3")
	rec = serve(t, svc, "POST", "/v1/messages", `{"topic":"t","payload":1}`, nil)
	if rec.Code != 409 || !strings.Contains(rec.Body.String(), `"expected_seq":"3"`) {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
}

func TestReadRendersJSONPayloadsBinaryAsBase64AndHoles(t *testing.T) {
	rec := serve(t, &recordingService{}, "GET", "/v1/messages?offset=5&limit=10", "", nil)
	var resp jsonReadResponse
	if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil {
		t.Fatal(err)
	}
	if len(resp.Messages) != 2 || string(resp.Messages[0].Payload) != `{"x":1}` ||
		resp.Messages[1].PayloadBase64 == nil || *resp.Messages[1].PayloadBase64 != "/wA=" {
		t.Fatalf("messages %+v", resp.Messages)
	}
	if len(resp.Skipped) != 1 || resp.Skipped[0] != (jsonSkipped{First: 6, End: 8}) || resp.NextOffset != 9 {
		t.Fatalf("resp %+v", resp)
	}
}

func TestTopicsAndHealth(t *testing.T) {
	if rec := serve(t, &recordingService{}, "POST", "/v1/topics", `{"name":"orders"}`, nil); rec.Code != 201 {
		t.Fatalf("create: %d %s", rec.Code, rec.Body)
	}
	if rec := serve(t, &recordingService{}, "POST", "/v1/topics", `{"name":"a/b"}`, nil); rec.Code != 400 {
		t.Fatalf("bad name: %d", rec.Code)
	}
	if rec := serve(t, &recordingService{}, "GET", "/v1/topics", "", nil); !strings.Contains(rec.Body.String(), `"name":"b"`) {
		t.Fatalf("list: %s", rec.Body)
	}
	if rec := serve(t, &recordingService{}, "GET", "/healthz", "", nil); rec.Code != 200 {
		t.Fatalf("healthz: %d", rec.Code)
	}
}

// storedService answers reads with the messages it holds.
type storedService struct {
	recordingService
	messages []*orderlogpb.Message
}

func (s *storedService) Query(context.Context, *orderlogpb.QueryRequest) (*orderlogpb.ReadResponse, error) {
	resp := &orderlogpb.ReadResponse{NextOffset: uint64(len(s.messages)), Committed: uint64(len(s.messages))}
	for i, m := range s.messages {
		resp.Messages = append(resp.Messages, &orderlogpb.StoredMessage{Offset: uint64(i), Message: m})
	}
	return resp, nil
}

// TestReadGivesBackTheStoredBytes: whatever a message holds, an HTTP reader
// rebuilds its value, header values and message id byte for byte (JSON that
// is not compact, HTML characters, bytes that are not UTF-8).
func TestReadGivesBackTheStoredBytes(t *testing.T) {
	notUTF8 := []byte{0xff, 0xfe, 'a'}
	svc := &storedService{messages: []*orderlogpb.Message{
		{Topic: "t", Value: []byte(`{"a":"<x>&"}`)},
		{Topic: "t", Value: []byte(`{ "a" : 1 }`)},
		{Topic: "t", Value: []byte("1\n")},
		{Topic: "t", Value: []byte(`"caf` + "\xe9" + `"`)},
		{Topic: "t", Value: []byte("v"), MessageId: notUTF8, Headers: []*orderlogpb.Header{{Key: "bin", Value: notUTF8}, {Key: "text", Value: []byte("<ok>")}}},
	}}
	rec := serve(t, svc, "GET", "/v1/messages?offset=0", "", nil)
	if !strings.Contains(rec.Body.String(), `"payload":{"a":"<x>&"}`) {
		t.Fatalf("compact JSON not sent as stored: %s", rec.Body)
	}
	var resp jsonReadResponse
	if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil || len(resp.Messages) != len(svc.messages) {
		t.Fatalf("%d %s: %v", rec.Code, rec.Body, err)
	}
	for i, got := range resp.Messages {
		want := svc.messages[i]
		value := []byte(got.Payload)
		if got.PayloadBase64 != nil {
			value = mustBase64(t, *got.PayloadBase64)
		}
		if !bytes.Equal(value, want.Value) {
			t.Errorf("message %d: value %q, stored %q", i, value, want.Value)
		}
		id := []byte(got.MessageID)
		if got.MessageID64 != "" {
			id = mustBase64(t, got.MessageID64)
		}
		if !bytes.Equal(id, want.MessageId) {
			t.Errorf("message %d: message id %q, stored %q", i, id, want.MessageId)
		}
		if len(got.Headers) != len(want.Headers) {
			t.Fatalf("message %d: %d headers, stored %d", i, len(got.Headers), len(want.Headers))
		}
		for k, h := range got.Headers {
			header, err := h.toProto()
			if err != nil || header.Key != want.Headers[k].Key || !bytes.Equal(header.Value, want.Headers[k].Value) {
				t.Errorf("message %d header %d: %+v (%v), stored %+v", i, k, header, err, want.Headers[k])
			}
		}
	}
}

func mustBase64(t *testing.T, s string) []byte {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The specified API: POST {key?, payload} without a topic goes to the
// default topic and is answered {success, partition, offset}; reads and
// topics take partitions.
func TestSpecifiedProduceReadAndTopicShapes(t *testing.T) {
	svc := &recordingService{}
	rec := serve(t, svc, "POST", "/v1/messages?ack=leader", `{"key":"user-42","payload":{"n":1}}`, nil)
	if rec.Code != 200 || strings.TrimSpace(rec.Body.String()) != `{"success":true,"partition":0,"offset":100,"duplicate":false}` {
		t.Fatalf("produce: %d %s", rec.Code, rec.Body)
	}
	if req := svc.produced[0]; req.Messages[0].Topic != DefaultTopic || req.Ack != orderlogpb.AckMode_ACK_MODE_LEADER {
		t.Fatalf("request %+v", req)
	}
	for text, want := range map[string]orderlogpb.AckMode{"replicated": orderlogpb.AckMode_ACK_MODE_REPLICATED, "quorum": orderlogpb.AckMode_ACK_MODE_REPLICATED} {
		serve(t, svc, "POST", "/v1/messages?ack="+text, `{"payload":1}`, nil)
		if got := svc.produced[len(svc.produced)-1].Ack; got != want {
			t.Fatalf("ack=%s: %v", text, got)
		}
	}
	if rec := serve(t, svc, "POST", "/v1/messages?ack=all", `{"payload":1}`, nil); rec.Code != 400 {
		t.Fatalf("ack=all: %d %s", rec.Code, rec.Body)
	}
	rec = serve(t, svc, "GET", "/v1/messages?partition=5&offset=12345&limit=100", "", nil)
	if q := svc.queries[0]; rec.Code != 200 || q.Partition == nil || *q.Partition != 5 || q.FromOffset != 12345 || q.Limit != 100 || q.Topic != "" {
		t.Fatalf("read by partition: %d %+v", rec.Code, q)
	}
	for _, bad := range []string{"partition=-1", "partition=x", "partition=1024", "topic=a/b"} {
		if rec := serve(t, svc, "GET", "/v1/messages?"+bad, "", nil); rec.Code != 400 {
			t.Errorf("%s: %d %s", bad, rec.Code, rec.Body)
		}
	}
	rec = serve(t, svc, "POST", "/v1/topics", `{"name":"orders","partitions":32}`, nil)
	if rec.Code != 201 || strings.TrimSpace(rec.Body.String()) != `{"name":"orders","partitions":32}` || svc.topics[0].Partitions != 32 {
		t.Fatalf("create: %d %s", rec.Code, rec.Body)
	}
	for _, bad := range []string{`{"name":"x","partitions":-1}`, `{"name":"x","partitions":1025}`, `{"name":"x","partitions":"4"}`} {
		if rec := serve(t, svc, "POST", "/v1/topics", bad, nil); rec.Code != 400 {
			t.Errorf("%s: %d %s", bad, rec.Code, rec.Body)
		}
	}
	if rec := serve(t, svc, "GET", "/v1/topics", "", nil); !strings.Contains(rec.Body.String(), `{"name":"b","partitions":4}`) {
		t.Fatalf("list: %s", rec.Body)
	}
	rec = serve(t, svc, "GET", "/v1/topics/orders/partitions", "", nil)
	want := `{"topic":"orders","partitions":[{"partition":0,"end_offset":9},{"partition":1,"end_offset":9}],"log_start":2,"committed":9}`
	if rec.Code != 200 || strings.TrimSpace(rec.Body.String()) != want {
		t.Fatalf("partitions: %d %s", rec.Code, rec.Body)
	}
}

// Bodies that are not UTF-8 and names beyond their limits are refused with
// 400 before anything reaches the service.
func TestNotUTF8AndLongNamesAreRefused(t *testing.T) {
	svc := &recordingService{}
	for _, tc := range []struct{ method, path, body string }{
		{"POST", "/v1/messages", "{\"payload\":\"\xff\xfe\"}"},
		{"POST", "/v1/messages", "[{\"payload\":1},{\"key\":\"\xc3\",\"payload\":2}]"},
		{"POST", "/v1/producers", "{\"name\":\"\xff\"}"},
		{"POST", "/v1/producers", `{"name":"` + strings.Repeat("n", 100<<10) + `"}`},
		{"POST", "/v1/producers", `{"name":"` + strings.Repeat("n", MaxProducerNameBytes+1) + `"}`},
		{"POST", "/v1/producers", `{"name":""}`},
		{"POST", "/v1/topics", `{"name":"` + strings.Repeat("t", MaxTopicNameLength+1) + `"}`},
		{"POST", "/v1/topics", "{\"name\":\"t\",\"cleanup_policy\":\"\xff\"}"},
	} {
		rec := serve(t, svc, tc.method, tc.path, tc.body, nil)
		if rec.Code != 400 {
			t.Errorf("%s %s %.40q: %d %s", tc.method, tc.path, tc.body, rec.Code, rec.Body)
		}
	}
	if rec := serve(t, svc, "POST", "/v1/producers", `{"name":"`+strings.Repeat("n", MaxProducerNameBytes)+`"}`, nil); rec.Code != 200 {
		t.Errorf("a name at the limit: %d %s", rec.Code, rec.Body)
	}
	for _, key := range []string{strings.Repeat("k", MaxIdempotencyKeyBytes+1), "\"unterminated", "tab\there", "caf\xc3\xa9"} {
		rec := serve(t, svc, "POST", "/v1/messages", `{"payload":1}`, http.Header{"Idempotency-Key": {key}})
		if rec.Code != 400 {
			t.Errorf("Idempotency-Key %.20q: %d %s", key, rec.Code, rec.Body)
		}
	}
	if len(svc.produced) != 0 || len(svc.topics) != 0 {
		t.Fatalf("refused requests reached the service: %d produced, %d topics", len(svc.produced), len(svc.topics))
	}
}

// An Idempotency-Key is taken bare or as the draft's sf-string, and every
// answer to a keyed request says how long keys are remembered.
func TestIdempotencyKeyFormsAndWindowHeader(t *testing.T) {
	svc := &recordingService{}
	for value, want := range map[string]string{`order-17`: "order-17", `"order-17"`: "order-17", `"a \"q\" \\ b"`: `a "q" \ b`} {
		rec := serve(t, svc, "POST", "/v1/messages", `{"payload":1}`, http.Header{"Idempotency-Key": {value}})
		if rec.Code != 200 || rec.Header().Get(IdempotencyWindowHeader) != "keys=1024, buckets=64" {
			t.Fatalf("%s: %d %s %v", value, rec.Code, rec.Body, rec.Header())
		}
		if got := svc.produced[len(svc.produced)-1].IdempotencyKey; got != want {
			t.Errorf("%s: key %q, want %q", value, got, want)
		}
	}
	svc.refuse = apierr.New(apierr.IdempotencyKeyReused, "different body")
	rec := serve(t, svc, "POST", "/v1/messages", `{"payload":2}`, http.Header{"Idempotency-Key": {"order-17"}})
	if rec.Code != 422 || !strings.Contains(rec.Body.String(), `"IDEMPOTENCY_KEY_REUSED"`) || rec.Header().Get(IdempotencyWindowHeader) == "" {
		t.Fatalf("reused: %d %s", rec.Code, rec.Body)
	}
	svc.refuse = apierr.New(apierr.IdempotencyKeyInFlight, "in flight")
	if rec := serve(t, svc, "POST", "/v1/messages", `{"payload":1}`, http.Header{"Idempotency-Key": {"order-17"}}); rec.Code != 409 {
		t.Fatalf("in flight: %d %s", rec.Code, rec.Body)
	}
	if rec := serve(t, &recordingService{}, "POST", "/v1/messages", `{"payload":1}`, nil); rec.Header().Get(IdempotencyWindowHeader) != "" {
		t.Fatalf("window header on an unkeyed request")
	}
}
