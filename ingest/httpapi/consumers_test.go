package httpapi

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"orderlog/internal/apierr"
	"orderlog/internal/partition"
	"orderlog/proto/orderlogpb"
)

// fakeConsumers stands in for package consumer: serve plays the
// membership; commits and describe answer from fields.
type fakeConsumers struct {
	serve    func(ctx context.Context, join *orderlogpb.JoinGroup, recv func() (*orderlogpb.ConsumeRequest, error), send func(*orderlogpb.ConsumeResponse) error) error
	commits  []*orderlogpb.GroupCommit
	describe *orderlogpb.GroupDescription
	refuse   error
}

func (f *fakeConsumers) Serve(ctx context.Context, join *orderlogpb.JoinGroup, recv func() (*orderlogpb.ConsumeRequest, error),
	send func(*orderlogpb.ConsumeResponse) error) error {
	return f.serve(ctx, join, recv, send)
}

func (f *fakeConsumers) CommitOffsets(_ context.Context, c *orderlogpb.GroupCommit) (*orderlogpb.CommitOffsetsResponse, error) {
	f.commits = append(f.commits, c)
	return &orderlogpb.CommitOffsetsResponse{}, f.refuse
}

func (f *fakeConsumers) DescribeGroup(_ context.Context, req *orderlogpb.DescribeGroupRequest) (*orderlogpb.GroupDescription, error) {
	if f.refuse != nil {
		return nil, f.refuse
	}
	d := f.describe
	d.Group = req.Group
	return d, nil
}

func consumersHandler(t *testing.T, c Consumers) *Handler {
	t.Helper()
	h, err := NewHandler(&recordingService{}, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	h.SetConsumers(c)
	return h
}

var (
	testAssignment = &orderlogpb.ConsumeResponse{Response: &orderlogpb.ConsumeResponse_Assignment{Assignment: &orderlogpb.Assignment{
		MemberId: "w-1", Generation: 3, Partitions: []*orderlogpb.PartitionOffset{{Topic: "t", Partition: 1, Offset: 40}}}}}
	testMessages = []*orderlogpb.StoredMessage{
		{Offset: 41, Message: &orderlogpb.Message{Topic: "t", Key: []byte("k"), Value: []byte(`{"x":1}`)}},
		{Offset: 44, Message: &orderlogpb.Message{Topic: "t", Value: []byte{0xff, 0x00}}},
	}
	testBatch = &orderlogpb.ConsumeResponse{Response: &orderlogpb.ConsumeResponse_Batch{Batch: &orderlogpb.ConsumeBatch{
		Generation: 3, Messages: testMessages, Partitions: []uint32{1, 1},
		Skipped: []*orderlogpb.SkippedRange{{First: 42, End: 44}}, NextOffset: 45, Committed: 45}}}
)

// TestConsumerStreamLinesThenAnErrorLine: the stream is NDJSON: the
// assignment, a batch whose messages are rendered as GET /v1/messages
// renders them plus their partition, and a last error line; commit
// results are not lines. No topic means the default topic.
func TestConsumerStreamLinesThenAnErrorLine(t *testing.T) {
	var joined *orderlogpb.JoinGroup
	fake := &fakeConsumers{serve: func(_ context.Context, join *orderlogpb.JoinGroup, _ func() (*orderlogpb.ConsumeRequest, error), send func(*orderlogpb.ConsumeResponse) error) error {
		joined = join
		for _, resp := range []*orderlogpb.ConsumeResponse{testAssignment, testBatch,
			{Response: &orderlogpb.ConsumeResponse_Commit{Commit: &orderlogpb.CommitResult{RequestId: 1}}}} {
			if err := send(resp); err != nil {
				return err
			}
		}
		return apierr.New(apierr.Unavailable, "the member's lease ended")
	}}
	rec := httptest.NewRecorder()
	consumersHandler(t, fake).ServeHTTP(rec, httptest.NewRequest("GET", "/v1/consumers/g%2F1/stream?client_name=w&start=latest&session_timeout_ms=5000", nil))
	want := &orderlogpb.JoinGroup{Group: "g/1", Topics: []string{DefaultTopic}, ClientName: "w", Start: "latest", SessionTimeoutMs: 5000}
	if !reflect.DeepEqual(joined, want) {
		t.Fatalf("joined %v, want %v", joined, want)
	}
	if rec.Code != 200 || rec.Header().Get("Content-Type") != "application/x-ndjson" || !rec.Flushed {
		t.Fatalf("%d %q flushed=%v", rec.Code, rec.Header().Get("Content-Type"), rec.Flushed)
	}
	lines := strings.Split(strings.TrimSuffix(rec.Body.String(), "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines:\n%s", len(lines), rec.Body.String())
	}
	if want := `{"assignment":{"member_id":"w-1","generation":3,"partitions":[{"topic":"t","partition":1,"offset":40}]}}`; lines[0] != want {
		t.Errorf("assignment line %s, want %s", lines[0], want)
	}
	var batch struct {
		Batch struct {
			Generation uint64           `json:"generation"`
			Messages   []map[string]any `json:"messages"`
			Skipped    []any            `json:"skipped"`
			NextOffset uint64           `json:"next_offset"`
			Committed  uint64           `json:"committed"`
		} `json:"batch"`
	}
	if err := json.Unmarshal([]byte(lines[1]), &batch); err != nil || len(batch.Batch.Messages) != 2 || len(batch.Batch.Skipped) != 1 ||
		batch.Batch.NextOffset != 45 || batch.Batch.Committed != 45 || batch.Batch.Generation != 3 {
		t.Fatalf("batch line %s (%v)", lines[1], err)
	}
	for i, m := range batch.Batch.Messages {
		if m["partition"] != float64(1) {
			t.Errorf("message %d: partition %v", i, m["partition"])
		}
		delete(m, "partition")
		var read map[string]any
		raw, _ := json.Marshal(encodeStored(testMessages[i]))
		_ = json.Unmarshal(raw, &read)
		if !reflect.DeepEqual(m, read) {
			t.Errorf("message %d streamed as %v, read as %v", i, m, read)
		}
	}
	var last struct{ Error jsonStreamError }
	if err := json.Unmarshal([]byte(lines[2]), &last); err != nil || last.Error.Code != apierr.Unavailable || !last.Error.Retryable {
		t.Errorf("last line %s (%v)", lines[2], err)
	}
}

// TestConsumerStreamErrorBeforeTheFirstLine: a refused join is an
// ordinary JSON error with its status, and a bad query never reaches the
// service.
func TestConsumerStreamErrorBeforeTheFirstLine(t *testing.T) {
	calls := 0
	fake := &fakeConsumers{serve: func(context.Context, *orderlogpb.JoinGroup, func() (*orderlogpb.ConsumeRequest, error), func(*orderlogpb.ConsumeResponse) error) error {
		calls++
		return apierr.New(apierr.UnknownTopic, "topic %q does not exist", "nope")
	}}
	h := consumersHandler(t, fake)
	for _, tc := range []struct {
		target string
		status int
		code   apierr.Code
		calls  int
	}{
		{"/v1/consumers/g/stream?topic=nope", 404, apierr.UnknownTopic, 1},
		{"/v1/consumers/g/stream?topic=a%2Fb", 400, apierr.InvalidArgument, 1},
		{"/v1/consumers/g/stream?topic=t&session_timeout_ms=-1", 400, apierr.InvalidArgument, 1},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", tc.target, nil))
		var body struct{ Error jsonStreamError }
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || rec.Code != tc.status || body.Error.Code != tc.code ||
			rec.Header().Get("Content-Type") != "application/json" || calls != tc.calls {
			t.Errorf("%s: %d %s (calls %d), want %d %s", tc.target, rec.Code, rec.Body, calls, tc.status, tc.code)
		}
	}
}

// TestConsumerStreamEndsTheMembership: the membership ends when the
// client goes away, and CloseStreams ends it with an UNAVAILABLE line.
func TestConsumerStreamEndsTheMembership(t *testing.T) {
	ended := make(chan error, 2)
	fake := &fakeConsumers{serve: func(ctx context.Context, _ *orderlogpb.JoinGroup, recv func() (*orderlogpb.ConsumeRequest, error), send func(*orderlogpb.ConsumeResponse) error) error {
		if err := send(testAssignment); err != nil {
			return err
		}
		_, err := recv() // the member sends nothing: recv returns when it is gone
		ended <- err
		<-ctx.Done()
		return context.Cause(ctx)
	}}
	h := consumersHandler(t, fake)
	srv := httptest.NewServer(h)
	defer srv.Close()
	open := func() (*bufio.Reader, context.CancelFunc) {
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/v1/consumers/g/stream?topic=t", nil)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		lines := bufio.NewReader(resp.Body)
		if line, err := lines.ReadString('\n'); err != nil || !strings.HasPrefix(line, `{"assignment":`) {
			t.Fatalf("first line %q (%v)", line, err)
		}
		return lines, cancel
	}
	waitEnded := func(what string) {
		select {
		case <-ended:
		case <-time.After(10 * time.Second):
			t.Fatalf("the membership did not end when %s", what)
		}
	}

	_, disconnect := open()
	disconnect()
	waitEnded("the client went away")

	lines, cancel := open()
	defer cancel()
	h.CloseStreams()
	waitEnded("the streams were closed")
	line, err := lines.ReadString('\n')
	var last struct{ Error jsonStreamError }
	if err != nil || json.Unmarshal([]byte(line), &last) != nil || last.Error.Code != apierr.Unavailable {
		t.Fatalf("line after CloseStreams %q (%v)", line, err)
	}
}

// TestCommitOffsetsAndDescribeGroup: a commit body becomes the service's
// GroupCommit and is answered {} or the service's error; a description
// leaves out a committed offset that does not exist and an owner that
// does not either.
func TestCommitOffsetsAndDescribeGroup(t *testing.T) {
	committed := uint64(7)
	fake := &fakeConsumers{describe: &orderlogpb.GroupDescription{Generation: 2, Committed: 10,
		Members: []*orderlogpb.GroupMember{{MemberId: "w-1", ClientName: "w", Topics: []string{"t"}, Node: "n1",
			Partitions: []*orderlogpb.PartitionOffset{{Topic: "t", Partition: 0, Offset: 7}}}},
		Partitions: []*orderlogpb.PartitionLag{
			{Topic: "t", Partition: 0, Committed: &committed, EndOffset: 10, Lag: 3, MemberId: "w-1"},
			{Topic: "t", Partition: 1, EndOffset: 10, Lag: 10},
		}}}
	h := consumersHandler(t, fake)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("POST", "/v1/consumers/g/offsets",
		strings.NewReader(`{"member_id":"w-1","generation":2,"offsets":[{"topic":"t","partition":0,"offset":7},{"partition":3,"offset":1}]}`)))
	want := &orderlogpb.GroupCommit{Group: "g", MemberId: "w-1", Generation: 2, Offsets: []*orderlogpb.PartitionOffset{
		{Topic: "t", Partition: 0, Offset: 7}, {Topic: DefaultTopic, Partition: 3, Offset: 1}}}
	if rec.Code != 200 || rec.Body.String() != "{}\n" || len(fake.commits) != 1 || !reflect.DeepEqual(fake.commits[0], want) {
		t.Fatalf("commit: %d %s %v", rec.Code, rec.Body, fake.commits)
	}

	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/v1/consumers/g", nil))
	wantBody := `{"group":"g","generation":2,"committed":10,"members":[{"member_id":"w-1","client_name":"w","topics":["t"],"node":"n1",` +
		`"partitions":[{"topic":"t","partition":0}]}],"partitions":[{"topic":"t","partition":0,"committed":7,"end_offset":10,"lag":3,` +
		`"member_id":"w-1"},{"topic":"t","partition":1,"end_offset":10,"lag":10}]}` + "\n"
	if rec.Code != 200 || rec.Body.String() != wantBody {
		t.Fatalf("describe: %d\n%s\nwant\n%s", rec.Code, rec.Body, wantBody)
	}

	fake.refuse = apierr.New(apierr.StaleGeneration, "generation 1 is over")
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("POST", "/v1/consumers/g/offsets", strings.NewReader(`{"member_id":"w-1","generation":1,"offsets":[{"offset":1}]}`)))
	if rec.Code != 409 || !strings.Contains(rec.Body.String(), `"STALE_GENERATION"`) {
		t.Fatalf("stale commit: %d %s", rec.Code, rec.Body)
	}
}

// TestConsumerRoutesNeedSetConsumers: a handler without consumer groups
// does not serve their paths.
func TestConsumerRoutesNeedSetConsumers(t *testing.T) {
	rec := serve(t, &recordingService{}, "GET", "/v1/consumers/g", "", nil)
	if rec.Code != 404 {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
}

// FuzzDecodeConsumers: the commit body and the stream's query never make
// decoding panic; refusals carry client codes; what is accepted is UTF-8
// with valid topics, partitions below the maximum, each at most once, a
// member and a generation.
func FuzzDecodeConsumers(f *testing.F) {
	f.Add("g", `{"member_id":"w-1","generation":2,"offsets":[{"topic":"t","partition":0,"offset":7}]}`, "topic=t&client_name=w")
	f.Add(strings.Repeat("g", MaxGroupNameBytes+44), `{"member_id":"w-1","generation":1,"offsets":[{"offset":1}]}`, "") // a 300-byte group name: the service's to refuse
	f.Add("g", "{\"member_id\":\"\xff\xfe\",\"generation\":1,\"offsets\":[{\"offset\":1}]}", "topic=\xff")              // not UTF-8
	f.Add("g", `{"member_id":"m","generation":1,"offsets":[{"partition":1024,"offset":1}]}`, "topic=a%2Fb")
	f.Add("g", `{"member_id":"m","generation":1,"offsets":[{"offset":1},{"topic":"default","offset":2}]}`, "session_timeout_ms=4294967296")
	f.Add("g", `{"member_id":"m","generation":0,"offsets":[]} {}`, "topic=&topic=t&session_timeout_ms=-1")
	f.Fuzz(func(t *testing.T, group, body, query string) {
		if c, err := DecodeGroupCommit(group, []byte(body)); err != nil {
			if apierr.As(err).Class() != apierr.ClassClient {
				t.Fatalf("refusal %v is not a client error", err)
			}
		} else {
			if !utf8.ValidString(body) || c.Group != group || c.MemberId == "" || c.Generation == 0 || len(c.Offsets) == 0 {
				t.Fatalf("accepted %v", c)
			}
			seen := map[jsonPartitionOffset]bool{}
			for _, o := range c.Offsets {
				key := jsonPartitionOffset{Topic: o.Topic, Partition: o.Partition}
				if ValidateTopicName(o.Topic) != nil || o.Partition >= partition.Max || seen[key] {
					t.Fatalf("accepted %v", c)
				}
				seen[key] = true
			}
		}
		values, err := url.ParseQuery(query)
		if err != nil {
			return
		}
		if join, err := DecodeJoin(group, values); err != nil {
			if apierr.As(err).Class() != apierr.ClassClient {
				t.Fatalf("refusal %v is not a client error", err)
			}
		} else if len(join.Topics) == 0 || join.Group != group {
			t.Fatalf("accepted %v", join)
		} else {
			for _, topic := range join.Topics {
				if ValidateTopicName(topic) != nil {
					t.Fatalf("accepted topic %q", topic)
				}
			}
		}
	})
}
