package node

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"orderlog/client"
	"orderlog/internal/apierr"
	"orderlog/proto/orderlogpb"
	"orderlog/schema"
)

const orderSchema = `{"type": "object", "properties": {"id": {"type": "integer"}, "customer": {"type": "string"}}, "required": ["id"]}`

// produceFrame sends one frame without a producer session and returns
// its answer.
func produceFrame(ctx context.Context, t *testing.T, s *Server, messages ...*orderlogpb.Message) *orderlogpb.ProduceResponse {
	t.Helper()
	stream, err := grpcProducer(t, s).Produce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&orderlogpb.ProduceRequest{Messages: messages}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	_ = stream.CloseSend()
	return resp
}

func schemaMsg(topic string, id uint32, value string) *orderlogpb.Message {
	return &orderlogpb.Message{Topic: topic, Value: []byte(value), SchemaId: id}
}

// TestStrictValidationRefusesAFrameWithABadMessageAndLogsNothingOfIt:
// with validation strict, one message of a frame that does not match the
// schema it names (or names none, or one of another topic) refuses the
// whole frame with SCHEMA_MISMATCH naming the message and why; nothing of
// it is logged. Warn logs it and counts it. Schema ids come back on the
// gRPC and HTTP reads, and metadata.schema_version resolves to the id.
func TestStrictValidationRefusesAFrameWithABadMessageAndLogsNothingOfIt(t *testing.T) {
	s := startServer(t, t.TempDir())
	defer s.Close()
	c := dial(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	reg := schema.New(s.cli)
	v1, err := reg.Register(ctx, "orders", schema.JSONSchema, orderSchema)
	if err != nil {
		t.Fatal(err)
	}
	other, err := reg.Register(ctx, "refunds", schema.Avro, `"string"`)
	if err != nil {
		t.Fatal(err)
	}
	id := uint32(v1.ID)
	// Before validation is on, anything goes, schema id or not.
	if resp := produceFrame(ctx, t, s, schemaMsg("orders", id, `not json`)); resp.ErrorCode != "" {
		t.Fatalf("validation none refused a frame: %s %s", resp.ErrorCode, resp.ErrorMessage)
	}
	if err := reg.SetValidation(ctx, "orders", schema.ValidateStrict); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "strict validation to reach the node", func() bool {
		return produceFrame(ctx, t, s, schemaMsg("orders", id, `{}`)).ErrorCode == string(apierr.SchemaMismatch)
	})
	for _, bad := range []struct {
		msg  *orderlogpb.Message
		want string
	}{
		{schemaMsg("orders", id, `{"id": "seven"}`), `message 1 of topic "orders": does not match schema id`},
		{schemaMsg("orders", 0, `{"id": 7}`), `message 1 of topic "orders": topic "orders" requires a schema id`},
		{schemaMsg("orders", uint32(other.ID), `{"id": 7}`), fmt.Sprintf(`schema id %d is not a version of subject "orders"`, other.ID)},
		{schemaMsg("orders", 999, `{"id": 7}`), `schema id 999 is not a version`},
		{schemaMsg("orders", id, `{"id": 7} trailing`), `data after the value`},
	} {
		resp := produceFrame(ctx, t, s, schemaMsg("orders", id, `{"id": 1}`), bad.msg, schemaMsg("orders", id, `{"id": 3}`))
		if resp.ErrorCode != string(apierr.SchemaMismatch) || !strings.Contains(resp.ErrorMessage, bad.want) {
			t.Errorf("%s: %s %q, want SCHEMA_MISMATCH with %q", bad.msg.Value, resp.ErrorCode, resp.ErrorMessage, bad.want)
		}
	}
	good := produceFrame(ctx, t, s, schemaMsg("orders", id, `{"id": 1, "customer": "a"}`), schemaMsg("orders", id, `{"id": 2}`))
	if good.ErrorCode != "" || len(good.Acks) != 2 {
		t.Fatalf("a matching frame: %s %s", good.ErrorCode, good.ErrorMessage)
	}
	// Another topic is not validated.
	if resp := produceFrame(ctx, t, s, schemaMsg("refunds", 0, `anything`)); resp.ErrorCode != "" {
		t.Fatalf("a topic without validation refused a frame: %s", resp.ErrorMessage)
	}

	// HTTP: metadata.schema_version as the specification writes it.
	base := "http://" + s.HTTPAddr()
	code, _, body := httpDo(t, "POST", base+"/v1/messages", `{"topic":"orders","payload":{"id":9},"metadata":{"schema_version":1}}`, nil)
	if code != 200 {
		t.Fatalf("POST with metadata.schema_version 1: %d %s", code, body)
	}
	code, _, body = httpDo(t, "POST", base+"/v1/messages", `{"topic":"orders","payload":{"id":"x"},"metadata":{"schema_version":1}}`, nil)
	if code != 400 || !strings.Contains(body, "SCHEMA_MISMATCH") {
		t.Fatalf("POST of a bad payload: %d %s, want 400 SCHEMA_MISMATCH", code, body)
	}
	code, _, body = httpDo(t, "POST", base+"/v1/messages", `{"topic":"orders","payload":{"id":9},"metadata":{"schema_version":7}}`, nil)
	if code != 404 || !strings.Contains(body, "UNKNOWN_SCHEMA_VERSION") {
		t.Fatalf("POST naming version 7: %d %s, want 404 UNKNOWN_SCHEMA_VERSION", code, body)
	}

	// Warn: logged as sent, and counted.
	if err := reg.SetValidation(ctx, "orders", schema.ValidateWarn); err != nil {
		t.Fatal(err)
	}
	var warned *orderlogpb.ProduceResponse
	waitFor(t, 10*time.Second, "warn validation to reach the node", func() bool {
		warned = produceFrame(ctx, t, s, schemaMsg("orders", id, `{"warned": true}`))
		return warned.ErrorCode == ""
	})
	waitCommitted(t, c, warned.Acks[0].Offset+1)
	if n := testutilCounter(t, s, "orderlog_ingest_schema_warnings_total"); n < 1 {
		t.Fatalf("schema warnings counted %v, want ≥ 1", n)
	}

	msgs, _ := readAll(t, c)
	var values []string
	for _, m := range msgs {
		if string(m.Message.Value) == `{}` {
			continue // a probe logged before strict validation reached the node
		}
		values = append(values, string(m.Message.Value))
		if m.Message.Topic == "orders" && m.Message.SchemaId != id && string(m.Message.Value) != `{"warned": true}` {
			t.Errorf("offset %d: schema id %d read back, want %d", m.Offset, m.Message.SchemaId, id)
		}
	}
	want := []string{`not json`, `{"id": 1, "customer": "a"}`, `{"id": 2}`, `anything`, `{"id":9}`, `{"warned": true}`}
	if strings.Join(values, "|") != strings.Join(want, "|") {
		t.Fatalf("the log holds %q, want %q: nothing of a refused frame", values, want)
	}
	code, _, body = httpDo(t, "GET", base+"/v1/messages?offset=0&limit=10", "", nil)
	if code != 200 || strings.Count(body, fmt.Sprintf(`"schema_id":%d`, id)) != 5+strings.Count(body, `"payload":{}`) {
		t.Fatalf("HTTP read: %d %s, want the schema id on the 5 orders messages", code, body)
	}
	var tailed *orderlogpb.StoredMessage
	tctx, tcancel := context.WithCancel(ctx)
	defer tcancel()
	_ = c.Tail(tctx, msgs[len(msgs)-2].Offset, func(p *client.Page) error {
		tailed = p.Messages[0]
		tcancel()
		return nil
	})
	if tailed == nil || tailed.Message.SchemaId != id {
		t.Fatalf("tail read %v, want schema id %d", tailed, id)
	}
}
