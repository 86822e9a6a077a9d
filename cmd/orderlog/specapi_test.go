package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"orderlog/client"
	"orderlog/internal/partition"
	"orderlog/proto/orderlogpb"
)

// httpCall sends one request to a dev process's HTTP API and returns the
// status, the body and the answer's headers.
func httpCall(t *testing.T, srv *serverProcess, method, path, body string, header map[string]string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+srv.httpAddr+path, strings.NewReader(body))
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
	return resp.StatusCode, string(raw), resp.Header
}

// specAck is the specified answer to POST /v1/messages.
type specAck struct {
	Success   *bool   `json:"success"`
	Partition *uint32 `json:"partition"`
	Offset    *uint64 `json:"offset"`
	Duplicate bool    `json:"duplicate"`
}

// specPost sends body to POST /v1/messages (query: "" or "?ack=…") and
// checks the specified answer: 200, success true, a partition and an offset.
func specPost(t *testing.T, srv *serverProcess, query, body string, header map[string]string) specAck {
	t.Helper()
	code, raw, _ := httpCall(t, srv, "POST", "/v1/messages"+query, body, header)
	var ack specAck
	if err := json.Unmarshal([]byte(raw), &ack); err != nil || code != 200 || ack.Success == nil || !*ack.Success ||
		ack.Partition == nil || ack.Offset == nil {
		t.Fatalf("POST /v1/messages%s %s: %d %s, want {success: true, partition, offset}", query, body, code, raw)
	}
	return ack
}

type specPage struct {
	Messages []struct {
		Offset  uint64          `json:"offset"`
		Topic   string          `json:"topic"`
		Key     string          `json:"key"`
		Payload json.RawMessage `json:"payload"`
	} `json:"messages"`
	NextOffset uint64 `json:"next_offset"`
	Committed  uint64 `json:"committed"`
}

// readPartition reads every message of a partition from offset 0 through
// GET /v1/messages?partition=&offset=&limit= (pages of limit) and returns
// their offsets and keys.
func readPartition(t *testing.T, srv *serverProcess, topicQuery string, p uint32, limit int) (offsets []uint64, keys []string) {
	t.Helper()
	for from := uint64(0); ; {
		path := fmt.Sprintf("/v1/messages?%spartition=%d&offset=%d&limit=%d", topicQuery, p, from, limit)
		code, raw, _ := httpCall(t, srv, "GET", path, "", nil)
		var page specPage
		if err := json.Unmarshal([]byte(raw), &page); err != nil || code != 200 {
			t.Fatalf("GET %s: %d %s", path, code, raw)
		}
		for _, m := range page.Messages {
			offsets, keys = append(offsets, m.Offset), append(keys, m.Key)
		}
		if page.NextOffset >= page.Committed {
			return offsets, keys
		}
		from = page.NextOffset
	}
}

// TestSpecifiedAPIAgainstDev sends the specification's own requests to a
// real `orderlog dev` process: POST {key?, payload} without a topic is
// answered {success: true, partition, offset}; GET
// /v1/messages?partition=&offset=&limit= returns that partition's messages
// in global order; POST /v1/topics {name, partitions} and GET
// /v1/topics/{topic}/partitions list them.
func TestSpecifiedAPIAgainstDev(t *testing.T) {
	srv, c := startDev(t)
	defer srv.stop()

	// The specified body, as a new user sends it first.
	first := specPost(t, srv, "", `{ "key": "user-42", "payload": {"amount": 5} }`, nil)
	if *first.Offset != 0 || *first.Partition != partition.Of([]byte("user-42"), partition.Default) {
		t.Fatalf("first message: partition %d offset %d", *first.Partition, *first.Offset)
	}
	if a := specPost(t, srv, "", `{"payload":"no key"}`, nil); *a.Partition != 0 {
		t.Fatalf("a message without a key is in partition %d, want 0", *a.Partition)
	}
	// More keys, with both ack options of the specification.
	want := map[uint32][]uint64{partition.Of([]byte("user-42"), partition.Default): {0}, 0: {1}}
	keyOf := map[uint64]string{0: "user-42", 1: ""}
	for i := range 60 {
		key := fmt.Sprintf("user-%d", i%12)
		query := []string{"", "?ack=leader", "?ack=replicated"}[i%3]
		a := specPost(t, srv, query, fmt.Sprintf(`{"key":%q,"payload":{"i":%d}}`, key, i), nil)
		if p := partition.Of([]byte(key), partition.Default); *a.Partition != p {
			t.Fatalf("key %s: partition %d, want %d", key, *a.Partition, p)
		}
		want[*a.Partition] = append(want[*a.Partition], *a.Offset)
		keyOf[*a.Offset] = key
	}
	waitCommittedAt(t, c, 62)

	// Every partition read back alone, in global order, in small pages and
	// through the specification's request shape.
	for p := range uint32(partition.Default) {
		offsets, keys := readPartition(t, srv, "", p, 3)
		if fmt.Sprint(offsets) != fmt.Sprint(want[p]) {
			t.Fatalf("partition %d: offsets %v, produced %v", p, offsets, want[p])
		}
		for i, key := range keys {
			if key != keyOf[offsets[i]] {
				t.Fatalf("partition %d offset %d: key %q, produced %q", p, offsets[i], key, keyOf[offsets[i]])
			}
		}
		// The gRPC Query by partition answers the same.
		var grpcOffsets []uint64
		err := c.Query(context.Background(), &orderlogpb.QueryRequest{Partition: &p}, func(page *client.Page) error {
			for _, m := range page.Messages {
				grpcOffsets = append(grpcOffsets, m.Offset)
			}
			return nil
		})
		if err != nil || fmt.Sprint(grpcOffsets) != fmt.Sprint(want[p]) {
			t.Fatalf("partition %d over gRPC: offsets %v, %v; produced %v", p, grpcOffsets, err, want[p])
		}
	}
	p := partition.Of([]byte("user-42"), partition.Default)
	code, raw, _ := httpCall(t, srv, "GET", fmt.Sprintf("/v1/messages?partition=%d&offset=%d&limit=100", p, want[p][1]), "", nil)
	var page specPage
	if err := json.Unmarshal([]byte(raw), &page); err != nil || code != 200 || len(page.Messages) != len(want[p])-1 ||
		page.Messages[0].Offset != want[p][1] || page.Messages[0].Topic != "default" {
		t.Fatalf("partition %d from offset %d: %d %s", p, want[p][1], code, raw)
	}

	// The default topic's partitions, then a topic created with its own count.
	var list struct {
		Topic      string `json:"topic"`
		Partitions []struct {
			Partition uint32 `json:"partition"`
			EndOffset uint64 `json:"end_offset"`
		} `json:"partitions"`
		Committed uint64 `json:"committed"`
	}
	code, raw, _ = httpCall(t, srv, "GET", "/v1/topics/default/partitions", "", nil)
	if err := json.Unmarshal([]byte(raw), &list); err != nil || code != 200 || list.Topic != "default" ||
		len(list.Partitions) != partition.Default || list.Committed < 62 {
		t.Fatalf("GET /v1/topics/default/partitions: %d %s", code, raw)
	}
	for i, entry := range list.Partitions {
		if entry.Partition != uint32(i) || entry.EndOffset != list.Committed {
			t.Fatalf("partition entry %d: %+v", i, entry)
		}
	}
	if code, raw, _ := httpCall(t, srv, "POST", "/v1/topics", `{"name":"orders","partitions":4}`, nil); code != 201 ||
		strings.TrimSpace(raw) != `{"name":"orders","partitions":4}` {
		t.Fatalf("POST /v1/topics: %d %s", code, raw)
	}
	a := specPost(t, srv, "", `{"topic":"orders","key":"user-42","payload":1}`, nil)
	if *a.Partition != partition.Of([]byte("user-42"), 4) {
		t.Fatalf("orders: partition %d, want %d", *a.Partition, partition.Of([]byte("user-42"), 4))
	}
	code, raw, _ = httpCall(t, srv, "GET", "/v1/topics/orders/partitions", "", nil)
	if err := json.Unmarshal([]byte(raw), &list); err != nil || code != 200 || len(list.Partitions) != 4 {
		t.Fatalf("GET /v1/topics/orders/partitions: %d %s", code, raw)
	}
	waitCommittedAt(t, c, *a.Offset+1)
	if offsets, _ := readPartition(t, srv, "topic=orders&", *a.Partition, 10); fmt.Sprint(offsets) != fmt.Sprint([]uint64{*a.Offset}) {
		t.Fatalf("orders partition %d: %v, want [%d]", *a.Partition, offsets, *a.Offset)
	}
	for path, wantCode := range map[string]int{
		"/v1/messages?topic=orders&partition=4":  400, // orders has partitions 0-3
		"/v1/messages?topic=nowhere&partition=0": 404,
		"/v1/topics/nowhere/partitions":          404,
	} {
		if code, raw, _ := httpCall(t, srv, "GET", path, "", nil); code != wantCode {
			t.Errorf("GET %s: %d %s, want %d", path, code, raw, wantCode)
		}
	}
	if code, raw, _ := httpCall(t, srv, "GET", "/v1/topics", "", nil); code != 200 ||
		!strings.Contains(raw, `{"name":"default","partitions":16}`) || !strings.Contains(raw, `{"name":"orders","partitions":4}`) {
		t.Fatalf("GET /v1/topics: %d %s", code, raw)
	}
}

// TestBadInputNeverReachesTheLog: against a real `orderlog dev`, bodies
// that are not UTF-8, names beyond their limits and unknown options are
// refused with 400, and nothing of them is logged or registered.
func TestBadInputNeverReachesTheLog(t *testing.T) {
	srv, c := startDev(t)
	defer srv.stop()
	long := func(n int) string { return strings.Repeat("n", n) }
	for _, tc := range []struct {
		method, path, body string
		header             map[string]string
	}{
		{"POST", "/v1/messages", "{\"payload\":\"\xff\xfe\"}", nil},
		{"POST", "/v1/messages", "{\"key\":\"k\xc3\",\"payload\":\"refused\"}", nil},
		{"POST", "/v1/messages", "[{\"payload\":\"refused\"},{\"payload\":\"\xed\xa0\x80\"}]", nil},
		{"POST", "/v1/messages", `{"topic":"` + long(201) + `","payload":"refused"}`, nil},
		{"POST", "/v1/messages", `{"payload":"refused"}`, map[string]string{"Idempotency-Key": long(257)}},
		{"POST", "/v1/messages?ack=all", `{"payload":"refused"}`, nil},
		{"POST", "/v1/producers", `{"name":"` + long(100<<10) + `"}`, nil},
		{"POST", "/v1/producers", "{\"name\":\"\xff\"}", nil},
		{"POST", "/v1/topics", `{"name":"refused","partitions":5000}`, nil},
		{"POST", "/v1/topics", "{\"name\":\"refused\",\"cleanup_policy\":\"\xff\"}", nil},
	} {
		if code, raw, _ := httpCall(t, srv, tc.method, tc.path, tc.body, tc.header); code != 400 {
			t.Errorf("%s %s %.60q: %d %s, want 400", tc.method, tc.path, tc.body, code, raw)
		}
	}
	good := specPost(t, srv, "", `{"payload":"fine"}`, nil)
	waitCommittedAt(t, c, *good.Offset+1)
	_, raw, _ := httpCall(t, srv, "GET", "/v1/messages?offset=0&limit=100", "", nil)
	var page specPage
	if err := json.Unmarshal([]byte(raw), &page); err != nil || len(page.Messages) != 1 || string(page.Messages[0].Payload) != `"fine"` {
		t.Fatalf("the log holds more than the good message: %s", raw)
	}
	if _, raw, _ := httpCall(t, srv, "GET", "/v1/topics", "", nil); strings.Contains(raw, "refused") || strings.Contains(raw, long(201)) {
		t.Fatalf("a refused topic was created: %s", raw)
	}
}

// TestIdempotencyKeyAsTheDraftSpecifies: against a real `orderlog dev`, a
// key reused with another body is refused with 422 IDEMPOTENCY_KEY_REUSED
// and nothing of it is logged, the same body gets the first offset back,
// every keyed answer names the window, and both hold across two restarts
// (the second one rebuilds the key's digest from a snapshot, the first
// from the logged message).
func TestIdempotencyKeyAsTheDraftSpecifies(t *testing.T) {
	srv, c := startDev(t)
	defer srv.stop()
	key := map[string]string{"Idempotency-Key": "key-a"}
	first := specPost(t, srv, "", `{"payload":"a"}`, key)
	check := func(when string) {
		t.Helper()
		code, raw, header := httpCall(t, srv, "POST", "/v1/messages", `{"payload":"DIFFERENT"}`, key)
		if code != 422 || !strings.Contains(raw, `"IDEMPOTENCY_KEY_REUSED"`) {
			t.Fatalf("%s: key-a with another body: %d %s, want 422 IDEMPOTENCY_KEY_REUSED", when, code, raw)
		}
		if header.Get("Orderlog-Idempotency-Window") != "keys=1024, buckets=64" {
			t.Fatalf("%s: window header %q", when, header.Get("Orderlog-Idempotency-Window"))
		}
		again := specPost(t, srv, "", `{ "payload" : "a" }`, map[string]string{"Idempotency-Key": `"key-a"`}) // the draft's sf-string form
		if !again.Duplicate || *again.Offset != *first.Offset || *again.Partition != *first.Partition {
			t.Fatalf("%s: key-a with its body: %+v, want the first offset %d as a duplicate", when, again, *first.Offset)
		}
	}
	check("at once")
	for _, when := range []string{"after a restart", "after a second restart"} {
		srv.stop()
		srv.start()
		srv.waitReady(c)
		check(when)
	}
	other := specPost(t, srv, "", `{"payload":"b"}`, map[string]string{"Idempotency-Key": "key-b"})
	waitCommittedAt(t, c, *other.Offset+1)
	_, raw, _ := httpCall(t, srv, "GET", "/v1/messages?offset=0&limit=100", "", nil)
	var page specPage
	if err := json.Unmarshal([]byte(raw), &page); err != nil || len(page.Messages) != 2 ||
		string(page.Messages[0].Payload) != `"a"` || string(page.Messages[1].Payload) != `"b"` {
		t.Fatalf("the log holds more than key-a's and key-b's first bodies: %s", raw)
	}
}
