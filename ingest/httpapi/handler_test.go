package httpapi

import (
	"context"
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
func (s *recordingService) CreateTopic(context.Context, string) error { return s.refuse }
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
	if len(resp.Skipped) != 1 || resp.Skipped[0] != (jsonSkipped{6, 8}) || resp.NextOffset != 9 {
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
