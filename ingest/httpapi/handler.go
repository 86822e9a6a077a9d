package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
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
	CreateTopic(ctx context.Context, req *orderlogpb.CreateTopicRequest) (*orderlogpb.Topic, error)
	ListTopics(ctx context.Context) ([]*orderlogpb.Topic, error)
	ListPartitions(ctx context.Context, req *orderlogpb.ListPartitionsRequest) (*orderlogpb.ListPartitionsResponse, error)
	// IdempotencyWindow is how many keys each idempotency bucket remembers
	// and how many buckets there are (0, 0: this node takes no messages).
	IdempotencyWindow() (keysPerBucket, buckets int)
}

// Handler serves the HTTP API over a Service.
type Handler struct {
	service Service
	limits  Limits
	mux     *http.ServeMux

	consumers Consumers // nil: no /v1/consumers routes (SetConsumers)
	// schemaVersions resolves metadata.schema_version (SetSchemaVersions).
	schemaVersions SchemaVersions
	// streams ends when CloseStreams is called: the consumer streams
	// follow it.
	streams      context.Context
	closeStreams context.CancelCauseFunc
}

// NewHandler returns the HTTP API. extra routes (e.g. /metrics) may be
// added to Mux before serving.
func NewHandler(service Service, limits Limits) (*Handler, error) {
	if err := limits.Validate(); err != nil {
		return nil, err
	}
	h := &Handler{service: service, limits: limits, mux: http.NewServeMux()}
	h.streams, h.closeStreams = context.WithCancelCause(context.Background())
	h.mux.HandleFunc("POST /v1/producers", h.initProducer)
	h.mux.HandleFunc("POST /v1/messages", h.produce)
	h.mux.HandleFunc("GET /v1/messages", h.read)
	h.mux.HandleFunc("POST /v1/topics", h.createTopic)
	h.mux.HandleFunc("GET /v1/topics", h.listTopics)
	h.mux.HandleFunc("GET /v1/topics/{topic}/partitions", h.listPartitions)
	h.mux.HandleFunc("GET /v1/status", h.status)
	h.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, map[string]string{"status": "ok"}) })
	return h, nil
}

// SetConsumers serves consumer groups over c (consumers.go): a group's
// description, offset commits, and a member's NDJSON stream. Call it once,
// before serving; without it these paths are not found.
func (h *Handler) SetConsumers(c Consumers) {
	h.consumers = c
	h.mux.HandleFunc("GET /v1/consumers/{group}", h.describeGroup)
	h.mux.HandleFunc("POST /v1/consumers/{group}/offsets", h.commitOffsets)
	h.mux.HandleFunc("GET /v1/consumers/{group}/stream", h.consumeStream)
}

// Mux exposes the router so the binary can add /metrics.
func (h *Handler) Mux() *http.ServeMux { return h.mux }

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

func (h *Handler) initProducer(w http.ResponseWriter, r *http.Request) {
	body, err := h.readBody(r)
	if err != nil {
		apierr.WriteHTTP(w, err)
		return
	}
	req, err := DecodeInitProducer(body)
	if err != nil {
		apierr.WriteHTTP(w, err)
		return
	}
	resp, err := h.service.InitProducer(r.Context(), req)
	if err != nil {
		apierr.WriteHTTP(w, err)
		return
	}
	writeJSON(w, map[string]uint64{"producer_id": resp.ProducerId, "epoch": resp.Epoch, "next_seq": resp.NextSeq})
}

func (h *Handler) produce(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Idempotency-Key") != "" {
		h.setIdempotencyWindow(w)
	}
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
	if call.Request.Ack, err = DecodeAck(r.URL.Query().Get("ack")); err != nil {
		apierr.WriteHTTP(w, err)
		return
	}
	if err := h.resolveSchemaVersions(r.Context(), call); err != nil {
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

// IdempotencyWindowHeader says how long an Idempotency-Key is remembered:
// "keys=K, buckets=B" (an RFC 8941 dictionary). A key is remembered until
// K more keys of its bucket (one of B, by the key's hash) were logged;
// a key reused after that is logged again as a new message.
const IdempotencyWindowHeader = "Orderlog-Idempotency-Window"

func (h *Handler) setIdempotencyWindow(w http.ResponseWriter) {
	if keys, buckets := h.service.IdempotencyWindow(); keys > 0 {
		w.Header().Set(IdempotencyWindowHeader, fmt.Sprintf("keys=%d, buckets=%d", keys, buckets))
	}
}

// read answers one page as JSON, or as an Arrow IPC stream when the
// Accept header asks for one (arrow.go); errors are JSON either way.
func (h *Handler) read(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Vary", "Accept")
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
	if AcceptsArrow(r.Header) {
		writeArrow(w, resp)
		return
	}
	writeJSON(w, encodeRead(resp))
}

func (h *Handler) createTopic(w http.ResponseWriter, r *http.Request) {
	body, err := h.readBody(r)
	if err != nil {
		apierr.WriteHTTP(w, err)
		return
	}
	req, err := DecodeCreateTopic(body)
	if err != nil {
		apierr.WriteHTTP(w, err)
		return
	}
	topic, err := h.service.CreateTopic(r.Context(), req)
	if err != nil {
		apierr.WriteHTTP(w, err)
		return
	}
	writeJSONStatus(w, http.StatusCreated, jsonTopic{Name: topic.Name, Partitions: topic.Partitions})
}

type jsonTopic struct {
	Name       string `json:"name"`
	Partitions uint32 `json:"partitions"`
}

func (h *Handler) listTopics(w http.ResponseWriter, r *http.Request) {
	list, err := h.service.ListTopics(r.Context())
	if err != nil {
		apierr.WriteHTTP(w, err)
		return
	}
	topics := make([]jsonTopic, len(list))
	for i, t := range list {
		topics[i] = jsonTopic{Name: t.Name, Partitions: t.Partitions}
	}
	writeJSON(w, map[string]any{"topics": topics})
}

// listPartitions answers GET /v1/topics/{topic}/partitions: every virtual
// partition with the offset its reads end at (the committed watermark: a
// partition is a sub-sequence of the one log).
func (h *Handler) listPartitions(w http.ResponseWriter, r *http.Request) {
	topic := r.PathValue("topic")
	if err := ValidateTopicName(topic); err != nil {
		apierr.WriteHTTP(w, err)
		return
	}
	resp, err := h.service.ListPartitions(r.Context(), &orderlogpb.ListPartitionsRequest{Topic: topic})
	if err != nil {
		apierr.WriteHTTP(w, err)
		return
	}
	writeJSON(w, encodePartitions(resp))
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
