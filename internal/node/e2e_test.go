package node

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"orderlog/client"
	"orderlog/ingest"
	"orderlog/ingest/producer"
	"orderlog/internal/apierr"
	"orderlog/proto/orderlogpb"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// startServer runs a whole orderlog in-process on free ports.
func startServer(t *testing.T, dir string) *Server {
	t.Helper()
	return startServerWith(t, Config{DataDir: dir})
}

// startServerWith is startServer with more of the configuration given.
func startServerWith(t *testing.T, cfg Config) *Server {
	t.Helper()
	cfg.GRPCAddr, cfg.HTTPAddr, cfg.Logger = "127.0.0.1:0", "127.0.0.1:0", testLogger(t)
	s, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.WaitReady(ctx); err != nil {
		s.Close()
		t.Fatal(err)
	}
	return s
}

func dial(t *testing.T, s *Server) *client.Client {
	t.Helper()
	c, err := client.Dial(s.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func msg(topic, key, value string) *orderlogpb.Message {
	return &orderlogpb.Message{Topic: topic, Key: []byte(key), Value: []byte(value)}
}

// readAll reads [0, C) and returns the messages and skipped ranges.
func readAll(t *testing.T, c *client.Client) ([]*orderlogpb.StoredMessage, []*orderlogpb.SkippedRange) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var msgs []*orderlogpb.StoredMessage
	var holes []*orderlogpb.SkippedRange
	err := c.Read(ctx, 0, 0, func(p *client.Page) error {
		msgs = append(msgs, p.Messages...)
		holes = append(holes, p.Skipped...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return msgs, holes
}

func TestProduceReadTailAndExactlyOnce(t *testing.T) {
	s := startServer(t, t.TempDir())
	defer s.Close()
	c := dial(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	tailed := make(chan uint64, 100)
	go func() {
		_ = c.Tail(ctx, 0, func(p *client.Page) error {
			for _, m := range p.Messages {
				tailed <- m.Offset
			}
			return nil
		})
	}()

	p, err := c.NewProducer(ctx, "orders-app", client.ProducerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var pending []*client.Pending
	for i := 0; i < 20; i++ {
		pd, err := p.Send(ctx, msg("orders", fmt.Sprintf("k%d", i%3), fmt.Sprintf("v%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		pending = append(pending, pd)
	}
	var offsets []uint64
	for _, pd := range pending {
		acks, err := pd.Wait(ctx)
		if err != nil {
			t.Fatal(err)
		}
		offsets = append(offsets, acks[0].Offset)
	}
	for i := 1; i < len(offsets); i++ {
		if offsets[i] <= offsets[i-1] {
			t.Fatalf("producer order broken: %v", offsets)
		}
	}

	waitCommitted(t, c, offsets[len(offsets)-1]+1)
	msgs, _ := readAll(t, c)
	byOffset := map[uint64]*orderlogpb.StoredMessage{}
	for _, m := range msgs {
		byOffset[m.Offset] = m
	}
	id, epoch := p.ID()
	for i, off := range offsets {
		m := byOffset[off]
		if m == nil || string(m.Message.Value) != fmt.Sprintf("v%d", i) || m.ProducerId != id || m.ProducerSeq != uint64(i) {
			t.Fatalf("offset %d: got %+v, want v%d from %d/%d", off, m, i, id, i)
		}
	}
	for range offsets {
		select {
		case <-tailed:
		case <-ctx.Done():
			t.Fatal("tail did not deliver every message")
		}
	}

	// A retried frame (same producer, epoch, seq) gets the original offsets.
	raw, err := grpcProducer(t, s).Produce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	send := func(req *orderlogpb.ProduceRequest) *orderlogpb.ProduceResponse {
		t.Helper()
		if err := raw.Send(req); err != nil {
			t.Fatal(err)
		}
		resp, err := raw.Recv()
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	resp := send(&orderlogpb.ProduceRequest{ProducerId: id, Epoch: epoch, FirstSeq: 3, RequestId: 1,
		Messages: []*orderlogpb.Message{msg("orders", "", "again3"), msg("orders", "", "again4")}})
	if len(resp.Acks) != 2 || !resp.Acks[0].Duplicate || resp.Acks[0].Offset != offsets[3] || resp.Acks[1].Offset != offsets[4] {
		t.Fatalf("retry answered %+v, want duplicates at %d, %d", resp, offsets[3], offsets[4])
	}
	resp = send(&orderlogpb.ProduceRequest{ProducerId: id, Epoch: epoch, FirstSeq: 25, RequestId: 2, Messages: []*orderlogpb.Message{msg("orders", "", "gap")}})
	if resp.ErrorCode != string(apierr.OutOfOrderSequence) || resp.ExpectedSeq != 20 {
		t.Fatalf("gap answered %+v", resp)
	}
	// A new instance of the producer fences the old epoch.
	p2, err := c.NewProducer(ctx, "orders-app", client.ProducerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Close()
	if _, epoch2 := p2.ID(); epoch2 != epoch+1 {
		t.Fatalf("new epoch %d, want %d", epoch2, epoch+1)
	}
	resp = send(&orderlogpb.ProduceRequest{ProducerId: id, Epoch: epoch, FirstSeq: 20, RequestId: 3, Messages: []*orderlogpb.Message{msg("orders", "", "stale")}})
	if resp.ErrorCode != string(apierr.ProducerFenced) {
		t.Fatalf("stale epoch answered %+v", resp)
	}
	acks, err := p2.Produce(ctx, msg("orders", "", "from the new instance"))
	if err != nil || acks[0].Offset <= offsets[len(offsets)-1] {
		t.Fatalf("new instance: %+v %v", acks, err)
	}

	// Nothing of a refused frame was logged: C counts exactly the 21 messages.
	waitCommitted(t, c, acks[0].Offset+1)
	after, _ := readAll(t, c)
	if len(after) != 21 {
		t.Fatalf("%d messages logged, want 21", len(after))
	}
}

// waitCommitted waits until C ≥ offset: acknowledgements come at the ack
// quorum, and C follows once the sequencer's commit records are confirmed.
func waitCommitted(t *testing.T, c *client.Client, offset uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c.WaitCommitted(ctx, offset); err != nil {
		t.Fatal(err)
	}
}

func grpcProducer(t *testing.T, s *Server) orderlogpb.ProducerClient {
	t.Helper()
	c := dial(t, s)
	return c.RawProducer()
}

func TestBadInputGetsStableCodesAndServerStaysHealthy(t *testing.T) {
	s := startServer(t, t.TempDir())
	defer s.Close()
	c := dial(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	raw, err := c.RawProducer().Produce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		req  *orderlogpb.ProduceRequest
		want apierr.Code
	}{
		{&orderlogpb.ProduceRequest{RequestId: 1}, apierr.InvalidArgument},
		{&orderlogpb.ProduceRequest{RequestId: 2, Messages: []*orderlogpb.Message{msg("a/b", "", "x")}}, apierr.InvalidArgument},
		{&orderlogpb.ProduceRequest{RequestId: 8, Ack: 9, Messages: []*orderlogpb.Message{msg("t", "", "x")}}, apierr.InvalidArgument},
		{&orderlogpb.ProduceRequest{RequestId: 3, Messages: []*orderlogpb.Message{{Topic: "t", Value: make([]byte, 2<<20)}}}, apierr.MessageTooLarge},
		{&orderlogpb.ProduceRequest{RequestId: 6, Messages: []*orderlogpb.Message{{Topic: "t", Value: []byte("x"),
			Headers: []*orderlogpb.Header{{Key: "h", Value: make([]byte, ingest.MaxMetadataBytes)}}}}}, apierr.MessageTooLarge},
		{&orderlogpb.ProduceRequest{RequestId: 4, ProducerId: 999, Epoch: 1, Messages: []*orderlogpb.Message{msg("t", "", "x")}}, apierr.UnknownProducer},
		{&orderlogpb.ProduceRequest{RequestId: 5, Epoch: 1, Messages: []*orderlogpb.Message{msg("t", "", "x")}}, apierr.InvalidArgument},
		{&orderlogpb.ProduceRequest{RequestId: 7, ProducerId: 999, Messages: []*orderlogpb.Message{msg("t", "", "x")}}, apierr.InvalidArgument},
	}
	for _, tc := range cases {
		if err := raw.Send(tc.req); err != nil {
			t.Fatal(err)
		}
		resp, err := raw.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if resp.ErrorCode != string(tc.want) || resp.RequestId != tc.req.RequestId {
			t.Errorf("request %d: got %q (%s), want %s", tc.req.RequestId, resp.ErrorCode, resp.ErrorMessage, tc.want)
		}
	}
	// Undecodable protobuf: the stream ends with MALFORMED_REQUEST.
	if code := sendUndecodableFrame(ctx, t, s.GRPCAddr()); code != apierr.MalformedRequest {
		t.Errorf("undecodable frame: got %q, want %s", code, apierr.MalformedRequest)
	}
	// Reads beyond C and absurd limits.
	err = c.Read(ctx, 1_000_000, 10, func(*client.Page) error { return nil })
	if apierr.As(err).Code != apierr.OffsetOutOfRange {
		t.Errorf("read beyond C: %v", err)
	}
	err = c.Read(ctx, 0, 4_000_000_000, func(*client.Page) error { return nil })
	if apierr.As(err).Code != apierr.LimitTooLarge {
		t.Errorf("absurd limit: %v", err)
	}
	// Still healthy: an anonymous message goes through.
	anon, err := c.RawProducer().Produce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := anon.Send(&orderlogpb.ProduceRequest{RequestId: 9, Messages: []*orderlogpb.Message{msg("t", "", "fine")}}); err != nil {
		t.Fatal(err)
	}
	if resp, err := anon.Recv(); err != nil || resp.ErrorCode != "" || len(resp.Acks) != 1 {
		t.Fatalf("anonymous produce after bad input: %+v %v", resp, err)
	}
	waitCommitted(t, c, 1)
	msgs, _ := readAll(t, c)
	if len(msgs) != 1 || string(msgs[0].Message.Value) != "fine" {
		t.Fatalf("log holds %d messages, want only the good one", len(msgs))
	}
}

// bytesCodec sends []byte messages as they are, under the protobuf codec's
// name, so the server decodes them as protobuf.
type bytesCodec struct{}

func (bytesCodec) Marshal(v any) ([]byte, error) { return v.([]byte), nil }
func (bytesCodec) Unmarshal(data []byte, v any) error {
	*v.(*[]byte) = append([]byte(nil), data...)
	return nil
}
func (bytesCodec) Name() string { return "proto" }

// sendUndecodableFrame sends a Produce frame that is not protobuf (a
// length-delimited field cut short) and returns the code the stream ends with.
func sendUndecodableFrame(ctx context.Context, t *testing.T, addr string) apierr.Code {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(bytesCodec{})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	stream, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, "/"+orderlogpb.Producer_ServiceDesc.ServiceName+"/Produce")
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.SendMsg([]byte{0x22, 0x05, 0x0a, 0x01}); err != nil {
		t.Fatal(err)
	}
	var reply []byte
	err = stream.RecvMsg(&reply)
	if err == nil {
		t.Fatalf("undecodable frame answered: %x", reply)
	}
	return apierr.FromGRPC(err).Code
}

func httpDo(t *testing.T, method, url, body string, header map[string]string) (int, map[string]any, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	_ = json.Unmarshal(raw, &out)
	return resp.StatusCode, out, string(raw)
}

func TestHTTPAPI(t *testing.T) {
	s := startServer(t, t.TempDir())
	defer s.Close()
	base := "http://" + s.HTTPAddr()
	code, body, raw := httpDo(t, "POST", base+"/v1/producers", `{"name":"web"}`, nil)
	if code != 200 || body["producer_id"] == nil {
		t.Fatalf("init producer: %d %s", code, raw)
	}
	id, epoch := fmt.Sprint(body["producer_id"]), fmt.Sprint(body["epoch"])
	headers := map[string]string{"Producer-Id": id, "Producer-Epoch": epoch, "Producer-Seq": "0"}
	code, _, raw = httpDo(t, "POST", base+"/v1/messages", `[{"topic":"web","key":"u1","payload":{"click":1}},{"topic":"web","payload_base64":"AAE="}]`, headers)
	if code != 200 || !strings.Contains(raw, `"offset":0`) || !strings.Contains(raw, `"offset":1`) {
		t.Fatalf("produce batch: %d %s", code, raw)
	}
	code, _, raw = httpDo(t, "POST", base+"/v1/messages", `[{"topic":"web","key":"u1","payload":{"click":1}},{"topic":"web","payload_base64":"AAE="}]`, headers)
	if code != 200 || !strings.Contains(raw, `"duplicate":true`) {
		t.Fatalf("retried batch: %d %s", code, raw)
	}
	gap := map[string]string{"Producer-Id": id, "Producer-Epoch": epoch, "Producer-Seq": "5"}
	code, _, raw = httpDo(t, "POST", base+"/v1/messages", `{"topic":"web","payload":1}`, gap)
	if code != 409 || !strings.Contains(raw, `"OUT_OF_ORDER_SEQUENCE"`) || !strings.Contains(raw, `"expected_seq":"2"`) {
		t.Fatalf("sequence gap: %d %s, want 409 with expected_seq 2", code, raw)
	}
	waitCommitted(t, dial(t, s), 2)
	code, body, raw = httpDo(t, "GET", base+"/v1/messages?offset=0&limit=10&key=u1", "", nil)
	messages, _ := body["messages"].([]any)
	if code != 200 || len(messages) != 1 || !strings.Contains(raw, `"payload":{"click":1}`) {
		t.Fatalf("read by key: %d %s", code, raw)
	}
	for _, tc := range []struct {
		method, path, body string
		want               int
	}{
		{"POST", "/v1/messages", `{"topic":`, 400},
		{"POST", "/v1/messages", `{"topic":"web","payload":"` + strings.Repeat("x", 2<<20) + `"}`, 413},
		{"GET", "/v1/messages?offset=99999", "", 416},
		{"GET", "/v1/messages?limit=0", "", 400},
		{"POST", "/v1/topics", `{"name":"web"}`, 409}, // created on first use
		{"POST", "/v1/topics", `{"name":"audit"}`, 201},
		{"POST", "/v1/topics", `{"name":"bad","retention_bytes":-1}`, 400},
		{"POST", "/v1/topics", `{"name":"capped","retention_bytes":1048576}`, 201},
	} {
		if code, _, raw := httpDo(t, tc.method, base+tc.path, tc.body, nil); code != tc.want {
			t.Errorf("%s %s: %d %s, want %d", tc.method, tc.path, code, raw, tc.want)
		}
	}
	if _, _, raw := httpDo(t, "GET", base+"/v1/topics", "", nil); !strings.Contains(raw, `"audit"`) || !strings.Contains(raw, `"web"`) {
		t.Errorf("topics: %s", raw)
	}
	if _, _, raw := httpDo(t, "GET", base+"/v1/status", "", nil); !strings.Contains(raw, `"committed":2`) {
		t.Errorf("status: %s", raw)
	}
	if _, _, raw := httpDo(t, "GET", base+"/metrics", "", nil); !strings.Contains(raw, "orderlog_ingest_logged_messages_total 2") || !strings.Contains(raw, "orderlog_committed_watermark 2") ||
		!regexp.MustCompile(`(?m)^orderlog_producers \d+$`).MatchString(raw) {
		t.Errorf("metrics lack counters:\n%.2000s", raw)
	} else if m := regexp.MustCompile(`(?m)^orderlog_wal_fsync_latency_seconds_count (\d+)$`).FindStringSubmatch(raw); m == nil || m[1] == "0" {
		t.Errorf("metrics lack the WAL fsync latency histogram (%v)", m)
	} else {
		checkFrameStages(t, raw)
	}
}

// checkFrameStages: every logged frame is observed once in each stage of
// the per-frame breakdown, and the stages add up to no more than the frames'
// ack latencies.
func checkFrameStages(t *testing.T, metrics string) {
	t.Helper()
	value := func(series string) float64 {
		m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(metrics)
		if m == nil {
			t.Fatalf("no %s in /metrics", series)
		}
		v, _ := strconv.ParseFloat(m[1], 64)
		return v
	}
	frames, ackSum := value("orderlog_ingest_ack_latency_seconds_count"), value("orderlog_ingest_ack_latency_seconds_sum")
	var stageSum float64
	for _, stage := range []string{"intake", "batch", "confirm", "answer"} {
		count := value(`orderlog_ingest_frame_stage_seconds_count{stage="` + stage + `"}`)
		if count == 0 || count > frames {
			t.Errorf("stage %s observed %v frames, %v were answered", stage, count, frames)
		}
		if first := value(`orderlog_ingest_frame_stage_seconds_count{stage="intake"}`); count != first {
			t.Errorf("stage %s observed %v frames, intake %v", stage, count, first)
		}
		stageSum += value(`orderlog_ingest_frame_stage_seconds_sum{stage="` + stage + `"}`)
	}
	if stageSum > ackSum {
		t.Errorf("the stages add up to %v s, the ack latencies to %v s", stageSum, ackSum)
	}
}

func TestRestartKeepsTheLogAndProducerState(t *testing.T) {
	dir := t.TempDir()
	s := startServer(t, dir)
	c := dial(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p, err := c.NewProducer(ctx, "svc", client.ProducerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	acks, err := p.Produce(ctx, msg("t", "", "a"), msg("t", "", "b"), msg("t", "", "c"))
	if err != nil {
		t.Fatal(err)
	}
	id, epoch := p.ID()
	p.Close()
	waitCommitted(t, c, acks[2].Offset+1)
	before, _ := readAll(t, c)
	s.Close()

	s = startServer(t, dir)
	defer s.Close()
	c = dial(t, s)
	after, _ := readAll(t, c)
	if len(after) != len(before) {
		t.Fatalf("after restart %d messages, before %d", len(after), len(before))
	}
	for i := range before {
		if after[i].Offset != before[i].Offset || string(after[i].Message.Value) != string(before[i].Message.Value) {
			t.Fatalf("message %d changed across restart: %+v vs %+v", i, after[i], before[i])
		}
	}
	// The old session continues on the new server: a retry is a duplicate.
	raw, err := c.RawProducer().Produce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := raw.Send(&orderlogpb.ProduceRequest{ProducerId: id, Epoch: epoch, FirstSeq: 1, RequestId: 1,
		Messages: []*orderlogpb.Message{msg("t", "", "b"), msg("t", "", "c"), msg("t", "", "d")}}); err != nil {
		t.Fatal(err)
	}
	resp, err := raw.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if resp.ErrorCode != "" || len(resp.Acks) != 3 || !resp.Acks[0].Duplicate || resp.Acks[0].Offset != acks[1].Offset ||
		resp.Acks[2].Duplicate || resp.Acks[2].Offset <= acks[2].Offset {
		t.Fatalf("continued session answered %+v (first acks %+v)", resp, acks)
	}
	// InitProducer after the restart continues after the last durable seq.
	p2, err := c.NewProducer(ctx, "svc", client.ProducerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Close()
	if pd, err := p2.Send(ctx, msg("t", "", "e")); err != nil || pd.FirstSeq() != 4 {
		t.Fatalf("next seq after restart: %v %v", pd, err)
	}
}

// TestHalfClosedStreamGetsEveryAnswer: a client that sends its frames and
// half-closes at once still gets one answer per frame before the stream
// ends (the server used to end it at the half-close, dropping them).
func TestHalfClosedStreamGetsEveryAnswer(t *testing.T) {
	s := startServer(t, t.TempDir())
	defer s.Close()
	c := dial(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	init, err := c.RawProducer().InitProducer(ctx, &orderlogpb.InitProducerRequest{Name: "half-close"})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := c.RawProducer().Produce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const frames, perFrame = 20, 5
	for f := range uint64(frames) {
		batch := make([]*orderlogpb.Message, perFrame)
		for i := range batch {
			batch[i] = msg("t", "", fmt.Sprintf("%d/%d", f, i))
		}
		if err := raw.Send(&orderlogpb.ProduceRequest{ProducerId: init.ProducerId, Epoch: init.Epoch,
			FirstSeq: f * perFrame, RequestId: f + 1, Messages: batch}); err != nil {
			t.Fatal(err)
		}
	}
	if err := raw.CloseSend(); err != nil {
		t.Fatal(err)
	}
	answered := 0
	for {
		resp, err := raw.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("after %d answers: %v", answered, err)
		}
		if resp.ErrorCode != "" || len(resp.Acks) != perFrame {
			t.Fatalf("answer %d: %+v", answered, resp)
		}
		answered++
	}
	if answered != frames {
		t.Fatalf("%d answers for %d frames", answered, frames)
	}
}

// TestInitProducerRacingAnOldInstanceAfterARestart: after a restart, an
// old instance's frame starts the node's takeover of its producer at the
// old epoch while the new instance's InitProducer raises the epoch. The new
// instance must get its session, never PRODUCER_FENCED; the old frame may
// be fenced.
func TestInitProducerRacingAnOldInstanceAfterARestart(t *testing.T) {
	dir := t.TempDir()
	s := startServer(t, dir)
	c := dial(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const producers = 12
	type old struct{ id, epoch uint64 }
	olds := make([]old, producers)
	for i := range olds {
		init, err := c.RawProducer().InitProducer(ctx, &orderlogpb.InitProducerRequest{Name: fmt.Sprintf("race-%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		olds[i] = old{init.ProducerId, init.Epoch}
	}
	s.Close()
	s = startServer(t, dir)
	defer s.Close()
	c = dial(t, s)
	var wg sync.WaitGroup
	errs := make(chan error, producers)
	for i, o := range olds {
		wg.Add(2)
		go func() { // the old instance retries a frame
			defer wg.Done()
			raw, err := c.RawProducer().Produce(ctx)
			if err != nil {
				return
			}
			_ = raw.Send(&orderlogpb.ProduceRequest{ProducerId: o.id, Epoch: o.epoch, FirstSeq: 0, RequestId: 1,
				Messages: []*orderlogpb.Message{msg("t", "", "old")}})
			_, _ = raw.Recv()
		}()
		go func() { // the new instance starts
			defer wg.Done()
			p, err := c.NewProducer(ctx, fmt.Sprintf("race-%d", i), client.ProducerOptions{})
			if err != nil {
				errs <- fmt.Errorf("new instance of race-%d: %w", i, err)
				return
			}
			p.Close()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestARefusedFrameFailsOnlyItselfAndLaterOnes: frames sent before one the
// server refuses outright (a value over the limit) are still logged, and the
// client must report them logged, not failed: a caller resending "failed"
// frames would log them twice. The refused frame and those after it fail
// with its code, and the producer takes no more.
func TestARefusedFrameFailsOnlyItselfAndLaterOnes(t *testing.T) {
	s := startServer(t, t.TempDir())
	defer s.Close()
	c := dial(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := c.NewProducer(ctx, "refused", client.ProducerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var before []*client.Pending
	for i := range 5 {
		pd, err := p.Send(ctx, msg("t", "", fmt.Sprintf("ok-%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		before = append(before, pd)
	}
	tooLarge, err := p.Send(ctx, &orderlogpb.Message{Topic: "t", Value: make([]byte, 2<<20)})
	if err != nil {
		t.Fatal(err)
	}
	after, err := p.Send(ctx, msg("t", "", "after"))
	if err != nil {
		t.Fatal(err)
	}
	for i, pd := range before {
		if acks, err := pd.Wait(ctx); err != nil || len(acks) != 1 {
			t.Fatalf("frame %d before the refused one: %v, %v", i, acks, err)
		}
	}
	for name, pd := range map[string]*client.Pending{"refused": tooLarge, "after": after} {
		if _, err := pd.Wait(ctx); apierr.As(err).Code != apierr.MessageTooLarge {
			t.Fatalf("%s frame: %v, want MESSAGE_TOO_LARGE", name, err)
		}
	}
	if _, err := p.Send(ctx, msg("t", "", "later")); err == nil {
		t.Fatal("a failed producer took another frame")
	}
}

func TestIdempotencyKeyAnswersTheOriginalOffsetAcrossRestarts(t *testing.T) {
	dir := t.TempDir()
	s := startServer(t, dir)
	post := func(s *Server, key, payload string) (int, string) {
		code, _, raw := httpDo(t, "POST", "http://"+s.HTTPAddr()+"/v1/messages",
			`{"topic":"pay","payload":`+payload+`}`, map[string]string{"Idempotency-Key": key})
		return code, raw
	}
	code, first := post(s, "order-17", `{"amount":5}`)
	if code != 200 || !strings.Contains(first, `"duplicate":false`) {
		t.Fatalf("first post: %d %s", code, first)
	}
	var firstAck struct{ Offset uint64 }
	_ = json.Unmarshal([]byte(first), &firstAck)
	if _, other := post(s, "order-18", `{"amount":6}`); !strings.Contains(other, `"duplicate":false`) {
		t.Fatalf("second key: %s", other)
	}
	code, again := post(s, "order-17", `{"amount":5}`)
	want := fmt.Sprintf(`{"success":true,"partition":0,"offset":%d,"duplicate":true}`, firstAck.Offset)
	if code != 200 || strings.TrimSpace(again) != want {
		t.Fatalf("retry: %d %s, want %s", code, again, want)
	}
	if code, raw := post(s, strings.Repeat("k", 300), `1`); code != 400 {
		t.Fatalf("oversized key: %d %s", code, raw)
	}
	s.Close()

	s = startServer(t, dir)
	defer s.Close()
	code, afterRestart := post(s, "order-17", `{"amount":5}`)
	if code != 200 || strings.TrimSpace(afterRestart) != want {
		t.Fatalf("retry after restart: %d %s, want %s", code, afterRestart, want)
	}
	c := dial(t, s)
	waitCommitted(t, c, firstAck.Offset+1)
	msgs, _ := readAll(t, c)
	keyed := 0
	for _, m := range msgs {
		if string(m.Message.MessageId) == "order-17" {
			keyed++
		}
	}
	if keyed != 1 {
		t.Fatalf("order-17 logged %d times", keyed)
	}
}

// Message values arrive aliasing the gRPC receive buffer, which goes back
// to the pool once its frame is answered and logged. Under concurrent
// producers, with the open ledger closed again and again (so batches are
// granted and encoded anew from the frames' records), every value read back
// must be exactly the one sent.
func TestValuesSurviveBufferReuseAndLedgerCloses(t *testing.T) {
	dir := t.TempDir()
	s := startServer(t, dir)
	defer func() { s.Close() }() // the server restarted at the end
	c := dial(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	stop := make(chan struct{})
	closerDone := make(chan struct{})
	var closeRounds atomic.Int64
	go func() {
		defer close(closerDone)
		for {
			select {
			case <-stop:
				return
			case <-time.After(15 * time.Millisecond):
			}
			for id := uint64(1); id < 500; id++ {
				s.ingest.CloseLedgerRequested(id) // only the node's open ledger is affected
			}
			closeRounds.Add(1)
		}
	}()
	// Each producer sends at least minFrames frames, and goes on until the
	// closer has closed the open ledger a few times under it.
	const producers, minFrames, perFrame, minCloseRounds = 4, 40, 32, 8
	var sent atomic.Int64
	value := func(name string, seq int) []byte {
		return append([]byte(fmt.Sprintf("%s/%d/", name, seq)), bytes.Repeat([]byte{byte('a' + seq%26)}, 200+seq%300)...)
	}
	var wg sync.WaitGroup
	var end struct {
		sync.Mutex
		offset uint64 // past the highest acknowledged offset
	}
	errs := make(chan error, producers)
	// What each producer ends with, to check its state after a restart.
	type sentFrame struct {
		firstSeq uint64
		messages []*orderlogpb.Message
		offsets  []uint64
	}
	type finalState struct {
		id, epoch, sent uint64
		frames          []sentFrame
	}
	finals := make([]finalState, producers)
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("reuse-%d", p)
			prod, err := c.NewProducer(ctx, name, client.ProducerOptions{MaxInFlight: 8})
			if err != nil {
				errs <- err
				return
			}
			defer prod.Close()
			final := &finals[p]
			final.id, final.epoch = prod.ID()
			var pending []*client.Pending
			for f := 0; f < minFrames || closeRounds.Load() < minCloseRounds; f++ {
				batch := make([]*orderlogpb.Message, perFrame)
				for i := range batch {
					batch[i] = &orderlogpb.Message{Topic: "reuse", Value: value(name, f*perFrame+i)}
				}
				pd, err := prod.Send(ctx, batch...)
				if err != nil {
					errs <- err
					return
				}
				pending = append(pending, pd)
				sent.Add(perFrame)
				final.sent += perFrame
				final.frames = append(final.frames, sentFrame{firstSeq: pd.FirstSeq(), messages: batch})
			}
			for i, pd := range pending {
				acks, err := pd.Wait(ctx)
				if err != nil {
					errs <- err
					return
				}
				for _, a := range acks {
					final.frames[i].offsets = append(final.frames[i].offsets, a.Offset)
					end.Lock()
					end.offset = max(end.offset, a.Offset+1)
					end.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-closerDone
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if err := c.WaitCommitted(ctx, end.offset); err != nil { // holes make offsets run past the count
		t.Fatal(err)
	}
	msgs, _ := readAll(t, c)
	seen := map[string]bool{}
	for _, m := range msgs {
		parts := strings.SplitN(string(m.Message.Value), "/", 3)
		seq, err := strconv.Atoi(parts[1])
		if len(parts) != 3 || err != nil || !bytes.Equal(m.Message.Value, value(parts[0], seq)) {
			t.Fatalf("offset %d holds a value that was never sent: %.80q", m.Offset, m.Message.Value)
		}
		if seen[parts[0]+"/"+parts[1]] {
			t.Fatalf("offset %d: %s/%d logged twice", m.Offset, parts[0], seq)
		}
		seen[parts[0]+"/"+parts[1]] = true
	}
	if int64(len(seen)) != sent.Load() {
		t.Fatalf("%d distinct messages logged, want %d", len(seen), sent.Load())
	}
	if opened := testutilCounter(t, s, "orderlog_ingest_ledgers_opened_total"); opened < 3 {
		t.Fatalf("only %v ledgers opened: the closes did not happen", opened)
	}

	// After a restart every producer's state is rebuilt from the ledgers,
	// whose head snapshots were taken as they were closed and opened under
	// load: a retry of any frame still in the dedup window is a duplicate
	// at its original offsets, and a new session continues after the last
	// seq sent.
	s.Close()
	s = startServer(t, dir)
	c = dial(t, s)
	for p, final := range finals {
		raw, err := c.RawProducer().Produce(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range final.frames {
			if f.firstSeq+producer.DefaultWindowSize < final.sent {
				continue // older than the window: answered DUPLICATE without an offset
			}
			if err := raw.Send(&orderlogpb.ProduceRequest{ProducerId: final.id, Epoch: final.epoch, FirstSeq: f.firstSeq,
				RequestId: f.firstSeq + 1, Messages: f.messages}); err != nil {
				t.Fatal(err)
			}
			resp, err := raw.Recv()
			if err != nil {
				t.Fatal(err)
			}
			if resp.ErrorCode != "" || len(resp.Acks) != len(f.offsets) {
				t.Fatalf("producer %d: retry of seqs from %d answered %+v", p, f.firstSeq, resp)
			}
			for i, a := range resp.Acks {
				if !a.Duplicate || a.Offset != f.offsets[i] {
					t.Fatalf("producer %d: retried seq %d answered %+v, want a duplicate at %d", p, f.firstSeq+uint64(i), a, f.offsets[i])
				}
			}
		}
		_ = raw.CloseSend()
		again, err := c.NewProducer(ctx, fmt.Sprintf("reuse-%d", p), client.ProducerOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pd, err := again.Send(ctx, msg("reuse", "", "after-restart"))
		if err != nil || pd.FirstSeq() != final.sent {
			t.Fatalf("producer %d: next seq after restart %v (%v), want %d", p, pd.FirstSeq(), err, final.sent)
		}
		again.Close()
	}
}

// testutilCounter reads a counter from the server's /metrics.
func testutilCounter(t *testing.T, s *Server, name string) float64 {
	t.Helper()
	_, _, raw := httpDo(t, "GET", "http://"+s.HTTPAddr()+"/metrics", "", nil)
	m := regexp.MustCompile(`(?m)^` + name + ` (\S+)$`).FindStringSubmatch(raw)
	if m == nil {
		t.Fatalf("no %s in /metrics", name)
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}
