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

func (s *recordingService) Query(context.Context, *orderlogpb.QueryRequest) (*orderlogpb.ReadResponse, error) {
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
func (s *recordingService) CreateTopic(context.Context, string, *orderlogpb.TopicConfig) error {
	return s.refuse
}
func (s *recordingService) ListTopics(context.Context) ([]string, error) {
	return []string{"a", "b"}, s.refuse
}

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
