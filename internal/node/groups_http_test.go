package node

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"orderlog/proto/orderlogpb"
)

// groupLine is one line of GET /v1/consumers/{group}/stream.
type groupLine struct {
	Assignment *struct {
		MemberID   string `json:"member_id"`
		Generation uint64 `json:"generation"`
		Partitions []struct {
			Topic     string `json:"topic"`
			Partition uint32 `json:"partition"`
			Offset    uint64 `json:"offset"`
		} `json:"partitions"`
	} `json:"assignment"`
	Batch *struct {
		Generation uint64            `json:"generation"`
		Messages   []json.RawMessage `json:"messages"`
		NextOffset uint64            `json:"next_offset"`
		Committed  uint64            `json:"committed"`
	} `json:"batch"`
	Error *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// httpGroupStream is one membership held by a plain net/http GET, read
// line by line as curl would.
type httpGroupStream struct {
	t      *testing.T
	cancel context.CancelFunc
	lines  chan groupLine // closed when the response ends
}

// openGroupStream starts the GET and returns once the answer's header
// came (with the first line); it fails unless that is a 200 NDJSON stream.
func openGroupStream(t *testing.T, url string) *httpGroupStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || ct != "application/x-ndjson" {
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("GET %s: %d %s %s", url, resp.StatusCode, ct, raw)
	}
	s := &httpGroupStream{t: t, cancel: cancel, lines: make(chan groupLine, 64)}
	go func() {
		defer close(s.lines)
		defer resp.Body.Close()
		scanner := bufio.NewScanner(resp.Body)
		scanner.Buffer(nil, 64<<20)
		for scanner.Scan() {
			var line groupLine
			if err := json.Unmarshal(scanner.Bytes(), &line); err != nil {
				t.Errorf("stream line %q: %v", scanner.Bytes(), err)
				return
			}
			select {
			case s.lines <- line:
			case <-ctx.Done():
				return
			}
		}
	}()
	return s
}

// next is the stream's next line; ok is false once the stream ended.
func (s *httpGroupStream) next() (line groupLine, ok bool) {
	s.t.Helper()
	select {
	case line, ok = <-s.lines:
		return line, ok
	case <-time.After(20 * time.Second):
		s.t.Fatal("no stream line within 20s")
		return groupLine{}, false
	}
}

// nextAssignment skips batches up to the next assignment line.
func (s *httpGroupStream) nextAssignment() groupLine {
	s.t.Helper()
	for {
		line, ok := s.next()
		switch {
		case !ok:
			s.t.Fatal("the stream ended before an assignment")
		case line.Error != nil:
			s.t.Fatalf("stream error %s: %s", line.Error.Code, line.Error.Message)
		case line.Assignment != nil:
			return line
		}
	}
}

// close disconnects, as a client that goes away.
func (s *httpGroupStream) close() { s.cancel() }

// groupHTTP is httpDo with a timeout: a request meant to be refused must
// not hang by joining a group.
func groupHTTP(t *testing.T, method, url, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Client{Timeout: 20 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("%s %.100s: %v", method, url, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw)
}

// jsonDescription is GET /v1/consumers/{group}.
type jsonDescription struct {
	Generation uint64 `json:"generation"`
	Committed  uint64 `json:"committed"`
	Members    []struct {
		MemberID   string   `json:"member_id"`
		ClientName string   `json:"client_name"`
		Topics     []string `json:"topics"`
		Node       string   `json:"node"`
		Partitions []struct {
			Topic     string `json:"topic"`
			Partition uint32 `json:"partition"`
		} `json:"partitions"`
	} `json:"members"`
	Partitions []struct {
		Topic     string  `json:"topic"`
		Partition uint32  `json:"partition"`
		Committed *uint64 `json:"committed"`
		EndOffset uint64  `json:"end_offset"`
		Lag       uint64  `json:"lag"`
		MemberID  string  `json:"member_id"`
	} `json:"partitions"`
}

func describeHTTP(t *testing.T, base, group string) jsonDescription {
	t.Helper()
	code, raw := groupHTTP(t, "GET", base+"/v1/consumers/"+group, "")
	var d jsonDescription
	if err := json.Unmarshal([]byte(raw), &d); code != 200 || err != nil {
		t.Fatalf("describe %s: %d %s (%v)", group, code, raw, err)
	}
	return d
}

// streamedMessage is the fields of a streamed message the test looks at.
type streamedMessage struct {
	Offset    uint64 `json:"offset"`
	Topic     string `json:"topic"`
	Partition uint32 `json:"partition"`
	raw       map[string]any
}

// TestHTTPGroupStreamCommitDescribeAndLeave: a member held by a plain HTTP
// GET gets its assignment and every message of its topic's 4 partitions,
// each as GET /v1/messages renders it plus its partition; half of each
// partition committed through POST shows in GET /v1/consumers/{group}
// with lag = C - committed; a second member makes the first one's
// generation stale (409); bad names and bodies get 400 and an unknown
// group 404; a closed stream's member leaves the group.
func TestHTTPGroupStreamCommitDescribeAndLeave(t *testing.T) {
	s := startServer(t, t.TempDir())
	defer s.Close()
	c := dial(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	base := "http://" + s.HTTPAddr()
	if code, raw := groupHTTP(t, "POST", base+"/v1/topics", `{"name":"orders","partitions":4}`); code != 201 {
		t.Fatalf("create topic: %d %s", code, raw)
	}
	acks := produceKeyed(ctx, t, c, "p1", "orders", 400, 40)
	produceKeyed(ctx, t, c, "p2", "other", 50, 5) // another topic: never delivered
	waitCommitted(t, c, acks[len(acks)-1].Offset+1)
	if code, raw := groupHTTP(t, "GET", base+"/v1/consumers/g", ""); code != 404 || !strings.Contains(raw, `"UNKNOWN_GROUP"`) {
		t.Fatalf("a group before its first member: %d %s, want 404 UNKNOWN_GROUP", code, raw)
	}

	a := openGroupStream(t, base+"/v1/consumers/g/stream?topic=orders&client_name=h1&start=earliest&session_timeout_ms=10000")
	first := a.nextAssignment().Assignment
	if len(first.Partitions) != 4 || first.MemberID == "" || first.Generation == 0 {
		t.Fatalf("first assignment: %+v", first)
	}
	before := describeHTTP(t, base, "g")
	if len(before.Members) != 1 || len(before.Partitions) != 4 {
		t.Fatalf("description before commits: %+v", before)
	}
	for _, p := range before.Partitions {
		if p.Committed != nil || p.Lag != p.EndOffset || p.MemberID != first.MemberID {
			t.Fatalf("partition %d before any commit: %+v", p.Partition, p)
		}
	}

	all := readGroupStream(t, a, 400)
	checkStreamedAsRead(t, base, acks, all)
	byPartition := map[uint32][]streamedMessage{}
	for _, m := range all {
		byPartition[m.Partition] = append(byPartition[m.Partition], m)
	}
	resumeAt := map[uint32]uint64{}
	var offsets []string
	for p, ms := range byPartition {
		half := ms[:len(ms)/2]
		resumeAt[p] = half[len(half)-1].Offset + 1
		offsets = append(offsets, fmt.Sprintf(`{"topic":"orders","partition":%d,"offset":%d}`, p, resumeAt[p]))
	}
	commitBody := func(member string, generation uint64, offsets ...string) string {
		return fmt.Sprintf(`{"member_id":%q,"generation":%d,"offsets":[%s]}`, member, generation, strings.Join(offsets, ","))
	}
	if code, raw := groupHTTP(t, "POST", base+"/v1/consumers/g/offsets", commitBody(first.MemberID, first.Generation, offsets...)); code != 200 || raw != "{}\n" {
		t.Fatalf("commit: %d %s", code, raw)
	}

	d := describeHTTP(t, base, "g")
	if d.Generation != first.Generation || len(d.Members) != 1 || len(d.Partitions) != 4 {
		t.Fatalf("description: %+v", d)
	}
	if m := d.Members[0]; m.MemberID != first.MemberID || m.ClientName != "h1" || !reflect.DeepEqual(m.Topics, []string{"orders"}) ||
		m.Node == "" || len(m.Partitions) != 4 {
		t.Fatalf("member: %+v", m)
	}
	for _, p := range d.Partitions {
		if p.Topic != "orders" || p.Committed == nil || *p.Committed != resumeAt[p.Partition] ||
			p.EndOffset != d.Committed || p.Lag != d.Committed-*p.Committed || p.MemberID != first.MemberID {
			t.Fatalf("partition %d: %+v, want committed %d and lag %d - committed", p.Partition, p, resumeAt[p.Partition], d.Committed)
		}
	}

	checkGroupBadInputs(t, base, commitBody(first.MemberID, first.Generation, offsets...))
	checkDefaultTopicStream(t, base)

	// a second member: a new generation, in which a's first one is stale
	b := openGroupStream(t, base+"/v1/consumers/g/stream?topic=orders&client_name=h2")
	second := b.nextAssignment().Assignment
	if second.Generation <= first.Generation || len(second.Partitions) != 2 {
		t.Fatalf("b's assignment: %+v", second)
	}
	if again := a.nextAssignment().Assignment; again.Generation != second.Generation || len(again.Partitions) != 2 {
		t.Fatalf("a's assignment after b joined: %+v", again)
	}
	code, raw := groupHTTP(t, "POST", base+"/v1/consumers/g/offsets", commitBody(first.MemberID, first.Generation, offsets...))
	if code != 409 || !strings.Contains(raw, `"STALE_GENERATION"`) {
		t.Fatalf("a commit from generation %d: %d %s, want 409 STALE_GENERATION", first.Generation, code, raw)
	}
	bs := second.Partitions[0]
	code, raw = groupHTTP(t, "POST", base+"/v1/consumers/g/offsets", commitBody(first.MemberID, second.Generation,
		fmt.Sprintf(`{"topic":%q,"partition":%d,"offset":%d}`, bs.Topic, bs.Partition, bs.Offset+1)))
	if code != 409 || !strings.Contains(raw, `"NOT_ASSIGNED"`) {
		t.Fatalf("a's commit of b's partition: %d %s, want 409 NOT_ASSIGNED", code, raw)
	}

	// a's client goes away: a leaves, b holds every partition from a's commits
	a.close()
	waitFor(t, 10*time.Second, "a to leave the description", func() bool {
		d := describeHTTP(t, base, "g")
		return len(d.Members) == 1 && d.Members[0].MemberID == second.MemberID
	})
	third := b.nextAssignment().Assignment
	if len(third.Partitions) != 4 {
		t.Fatalf("b alone: %+v", third)
	}
	for _, p := range third.Partitions {
		if p.Offset != resumeAt[p.Partition] {
			t.Fatalf("b resumes partition %d at %d, want the commit %d", p.Partition, p.Offset, resumeAt[p.Partition])
		}
	}

	// the last member goes away: the group's next generation has no
	// member, and a member joining next is alone
	b.close()
	waitFor(t, 10*time.Second, "b to leave an empty group", func() bool { return len(describeHTTP(t, base, "g").Members) == 0 })
	next := openGroupStream(t, base+"/v1/consumers/g/stream?topic=orders&client_name=h3")
	defer next.close()
	waitFor(t, 10*time.Second, "b to leave and h3 to be alone", func() bool {
		d := describeHTTP(t, base, "g")
		return len(d.Members) == 1 && d.Members[0].ClientName == "h3" && len(d.Members[0].Partitions) == 4
	})
}

// readGroupStream reads batches until n messages came, failing at a new
// assignment or an error line.
func readGroupStream(t *testing.T, s *httpGroupStream, n int) []streamedMessage {
	t.Helper()
	var got []streamedMessage
	for len(got) < n {
		line, ok := s.next()
		switch {
		case !ok:
			t.Fatalf("the stream ended after %d messages", len(got))
		case line.Batch == nil:
			t.Fatalf("after %d messages, a line without a batch: %+v", len(got), line)
		}
		for _, raw := range line.Batch.Messages {
			var m streamedMessage
			if err := json.Unmarshal(raw, &m); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(raw, &m.raw); err != nil {
				t.Fatal(err)
			}
			got = append(got, m)
		}
	}
	if len(got) != n {
		t.Fatalf("%d messages, want %d", len(got), n)
	}
	return got
}

// checkStreamedAsRead: the messages are those produced, each in its
// partition, in offset order per partition, and each is what GET
// /v1/messages answers for it with a "partition" field added.
func checkStreamedAsRead(t *testing.T, base string, acks []*orderlogpb.Ack, got []streamedMessage) {
	t.Helper()
	code, body, raw := httpDo(t, "GET", base+"/v1/messages?topic=orders&limit=1000", "", nil)
	read, _ := body["messages"].([]any)
	if code != 200 || len(read) != len(acks) {
		t.Fatalf("read: %d %.300s", code, raw)
	}
	readAt := map[uint64]any{}
	for _, m := range read {
		readAt[uint64(m.(map[string]any)["offset"].(float64))] = m
	}
	last := map[uint32]uint64{}
	for i, m := range got {
		ack := acks[m.Offset-acks[0].Offset]
		if m.Topic != "orders" || m.Partition != ack.Partition {
			t.Fatalf("message %d at %d: topic %q partition %d, produced in %d", i, m.Offset, m.Topic, m.Partition, ack.Partition)
		}
		if prev, ok := last[m.Partition]; ok && m.Offset <= prev {
			t.Fatalf("partition %d: offset %d after %d", m.Partition, m.Offset, prev)
		}
		last[m.Partition] = m.Offset
		if _, ok := m.raw["partition"]; !ok {
			t.Fatalf("message %d has no partition field", m.Offset)
		}
		delete(m.raw, "partition")
		if !reflect.DeepEqual(m.raw, readAt[m.Offset]) {
			t.Fatalf("message %d streamed as %v, read as %v", m.Offset, m.raw, readAt[m.Offset])
		}
	}
}

// checkGroupBadInputs: bad names, bodies and parameters are refused
// before anything is stored or joined.
func checkGroupBadInputs(t *testing.T, base, goodCommit string) {
	t.Helper()
	long := strings.Repeat("g", 300)
	for _, tc := range []struct {
		method, path, body string
		want               int
		code               string
	}{
		{"GET", "/v1/consumers/nobody", "", 404, "UNKNOWN_GROUP"},
		{"GET", "/v1/consumers/" + long, "", 400, "INVALID_ARGUMENT"},
		{"POST", "/v1/consumers/" + long + "/offsets", goodCommit, 400, "INVALID_ARGUMENT"},
		{"GET", "/v1/consumers/" + long + "/stream?topic=orders", "", 400, "INVALID_ARGUMENT"},
		{"GET", "/v1/consumers/bad%01name", "", 400, "INVALID_ARGUMENT"},
		{"POST", "/v1/consumers/g/offsets", `{"member_id":`, 400, "MALFORMED_REQUEST"},
		{"POST", "/v1/consumers/g/offsets", "{\"member_id\":\"\xff\xfe\",\"generation\":1,\"offsets\":[]}", 400, "MALFORMED_REQUEST"},
		{"POST", "/v1/consumers/g/offsets", strings.TrimSuffix(goodCommit, "}") + `,"group":"g"}`, 400, "MALFORMED_REQUEST"},
		{"POST", "/v1/consumers/g/offsets", goodCommit + "}", 400, "MALFORMED_REQUEST"},
		{"POST", "/v1/consumers/g/offsets", `{"member_id":"m","generation":1,"offsets":[{"topic":"orders","partition":-1,"offset":0}]}`, 400, "MALFORMED_REQUEST"},
		{"POST", "/v1/consumers/g/offsets", `{"member_id":"m","generation":1,"offsets":[]}`, 400, "INVALID_ARGUMENT"},
		{"POST", "/v1/consumers/g/offsets", `{"generation":1,"offsets":[{"topic":"orders","partition":0,"offset":1}]}`, 400, "INVALID_ARGUMENT"},
		{"POST", "/v1/consumers/g/offsets", `{"member_id":"m","generation":1,"offsets":[{"topic":"a/b","partition":0,"offset":1}]}`, 400, "INVALID_ARGUMENT"},
		{"POST", "/v1/consumers/g/offsets", `{"member_id":"m","generation":1,"offsets":[{"topic":"orders","partition":0,"offset":1},{"topic":"orders","partition":0,"offset":2}]}`, 400, "INVALID_ARGUMENT"},
		{"GET", "/v1/consumers/g/stream?topic=nonexistent", "", 404, "UNKNOWN_TOPIC"},
		{"GET", "/v1/consumers/g/stream?topic=a%2Fb", "", 400, "INVALID_ARGUMENT"},
		{"GET", "/v1/consumers/g/stream?topic=orders&start=middle", "", 400, "INVALID_ARGUMENT"},
		{"GET", "/v1/consumers/g/stream?topic=orders&session_timeout_ms=1000", "", 400, "INVALID_ARGUMENT"},
		{"GET", "/v1/consumers/g/stream?topic=orders&session_timeout_ms=soon", "", 400, "INVALID_ARGUMENT"},
		{"GET", "/v1/consumers/g/stream?topic=orders&client_name=" + strings.Repeat("c", 257), "", 400, "INVALID_ARGUMENT"},
	} {
		code, raw := groupHTTP(t, tc.method, base+tc.path, tc.body)
		if code != tc.want || !strings.Contains(raw, `"code":"`+tc.code+`"`) {
			t.Errorf("%s %.80s %.80q: %d %s, want %d %s", tc.method, tc.path, tc.body, code, raw, tc.want, tc.code)
		}
	}
}

// checkDefaultTopicStream: a stream that names no topic consumes the
// default topic's partitions.
func checkDefaultTopicStream(t *testing.T, base string) {
	t.Helper()
	s := openGroupStream(t, base+"/v1/consumers/d/stream")
	defer s.close()
	a := s.nextAssignment().Assignment
	if len(a.Partitions) == 0 {
		t.Fatalf("default topic assignment: %+v", a)
	}
	for _, p := range a.Partitions {
		if p.Topic != "default" {
			t.Fatalf("a stream without a topic is assigned %+v", a.Partitions)
		}
	}
}

// TestHTTPGroupStreamEndsWithAnErrorLineAtShutdown: a node that shuts
// down ends its consumer streams with an UNAVAILABLE line rather than
// making Close wait for them.
func TestHTTPGroupStreamEndsWithAnErrorLineAtShutdown(t *testing.T) {
	s := startServer(t, t.TempDir())
	c := dial(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	produceKeyed(ctx, t, c, "p", "", 10, 10)
	stream := openGroupStream(t, "http://"+s.HTTPAddr()+"/v1/consumers/g/stream")
	stream.nextAssignment()
	closed := make(chan struct{})
	go func() { s.Close(); close(closed) }()
	for {
		line, ok := stream.next()
		if !ok {
			t.Fatal("the stream ended without an error line")
		}
		if line.Error != nil {
			if line.Error.Code != "UNAVAILABLE" {
				t.Fatalf("last line: %+v", line.Error)
			}
			break
		}
	}
	if _, ok := stream.next(); ok {
		t.Fatal("a line after the error line")
	}
	<-closed
}
