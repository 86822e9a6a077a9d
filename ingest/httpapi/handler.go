package httpapi

import (
	"context"
	"encoding/json"
	"io"
	"net/http"

	"orderlog/internal/apierr"
	"orderlog/proto/orderlogpb"
)

// Service is the logic behind both APIs; the gRPC front end calls the same.
type Service interface {
	InitProducer(ctx context.Context, req *orderlogpb.InitProducerRequest) (*orderlogpb.InitProducerResponse, error)
	// Produce logs the request's messages and returns one ack per message,
	// in order, once they are durable (or refuses the whole request).
	Produce(ctx context.Context, req *orderlogpb.ProduceRequest) ([]*orderlogpb.Ack, error)
	// Query returns one page of messages in offset order, below C.
	Query(ctx context.Context, req *orderlogpb.QueryRequest) (*orderlogpb.ReadResponse, error)
	Status(ctx context.Context) (*orderlogpb.StatusResponse, error)
	CreateTopic(ctx context.Context, name string, config *orderlogpb.TopicConfig) error
	ListTopics(ctx context.Context) ([]string, error)
}

// Handler serves the HTTP API over a Service.
type Handler struct {
	service Service
	limits  Limits
	mux     *http.ServeMux
}

// NewHandler returns the HTTP API. extra routes (e.g. /metrics) may be
// added to Mux before serving.
func NewHandler(service Service, limits Limits) (*Handler, error) {
	if err := limits.Validate(); err != nil {
		return nil, err
	}
	h := &Handler{service: service, limits: limits, mux: http.NewServeMux()}
	h.mux.HandleFunc("POST /v1/producers", h.initProducer)
	h.mux.HandleFunc("POST /v1/messages", h.produce)
	h.mux.HandleFunc("GET /v1/messages", h.read)
	h.mux.HandleFunc("POST /v1/topics", h.createTopic)
	h.mux.HandleFunc("GET /v1/topics", h.listTopics)
	h.mux.HandleFunc("GET /v1/status", h.status)
	h.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, map[string]string{"status": "ok"}) })
	return h, nil
}

// Mux exposes the router so the binary can add /metrics.
func (h *Handler) Mux() *http.ServeMux { return h.mux }

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

func (h *Handler) initProducer(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Name string `json:"name"`
	}
	if err := h.decodeBody(r, &body); err != nil {
		apierr.WriteHTTP(w, err)
		return
	}
	if body.Name == "" {
		apierr.WriteHTTP(w, apierr.New(apierr.InvalidArgument, "name is required"))
		return
	}
	resp, err := h.service.InitProducer(r.Context(), &orderlogpb.InitProducerRequest{Name: body.Name})
	if err != nil {
		apierr.WriteHTTP(w, err)
		return
	}
	writeJSON(w, map[string]uint64{"producer_id": resp.ProducerId, "epoch": resp.Epoch, "next_seq": resp.NextSeq})
}

func (h *Handler) produce(w http.ResponseWriter, r *http.Request) {
	body, err := h.readBody(r)
	if err != nil {
		apierr.WriteHTTP(w, err)
		return
	}
	call, err := DecodeProduce(r.Header, body, h.limits)
	if err != nil {
		apierr.WriteHTTP(w, err)
		return
	}
	acks, err := h.service.Produce(r.Context(), call.Request)
	if err != nil {
		apierr.WriteHTTP(w, err)
		return
	}
	writeJSON(w, encodeAcks(acks, call.Batch))
}

func (h *Handler) read(w http.ResponseWriter, r *http.Request) {
	call, err := DecodeRead(r.URL.Query(), h.limits)
	if err != nil {
		apierr.WriteHTTP(w, err)
		return
	}
	resp, err := h.service.Query(r.Context(), call.Request)
	if err != nil {
		apierr.WriteHTTP(w, err)
		return
	}
	writeJSON(w, encodeRead(resp))
}

func (h *Handler) createTopic(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Name              string `json:"name"`
		CleanupPolicy     string `json:"cleanup_policy"`
		RetentionMs       int64  `json:"retention_ms"`
		DeleteRetentionMs int64  `json:"delete_retention_ms"`
		RetentionBytes    int64  `json:"retention_bytes"`
	}
	if err := h.decodeBody(r, &body); err != nil {
		apierr.WriteHTTP(w, err)
		return
	}
	if err := ValidateTopicName(body.Name); err != nil {
		apierr.WriteHTTP(w, err)
		return
	}
	config := &orderlogpb.TopicConfig{CleanupPolicy: body.CleanupPolicy, RetentionMs: body.RetentionMs, DeleteRetentionMs: body.DeleteRetentionMs,
		RetentionBytes: body.RetentionBytes}
	if err := h.service.CreateTopic(r.Context(), body.Name, config); err != nil {
		apierr.WriteHTTP(w, err)
		return
	}
	writeJSONStatus(w, http.StatusCreated, map[string]string{"name": body.Name})
}

func (h *Handler) listTopics(w http.ResponseWriter, r *http.Request) {
	names, err := h.service.ListTopics(r.Context())
	if err != nil {
		apierr.WriteHTTP(w, err)
		return
	}
	topics := make([]map[string]string, len(names))
	for i, name := range names {
		topics[i] = map[string]string{"name": name}
	}
	writeJSON(w, map[string]any{"topics": topics})
}

func (h *Handler) status(w http.ResponseWriter, r *http.Request) {
	resp, err := h.service.Status(r.Context())
	if err != nil {
		apierr.WriteHTTP(w, err)
		return
	}
	writeJSON(w, resp)
}

func (h *Handler) readBody(r *http.Request) ([]byte, error) {
	body, err := io.ReadAll(io.LimitReader(r.Body, int64(h.limits.MaxBodyBytes)+1))
	if err != nil {
		return nil, apierr.New(apierr.MalformedRequest, "reading body: %v", err)
	}
	if len(body) > h.limits.MaxBodyBytes {
		return nil, apierr.New(apierr.BatchTooLarge, "body exceeds %d bytes", h.limits.MaxBodyBytes)
	}
	return body, nil
}

func (h *Handler) decodeBody(r *http.Request, v any) error {
	body, err := h.readBody(r)
	if err != nil {
		return err
	}
	return strictUnmarshal(body, v)
}

func writeJSON(w http.ResponseWriter, v any) { writeJSONStatus(w, http.StatusOK, v) }

func writeJSONStatus(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // payloads go out as stored: `<` stays `<`
	_ = enc.Encode(v)
}
