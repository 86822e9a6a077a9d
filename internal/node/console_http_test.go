package node

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"orderlog/proto/orderlogpb"
)

// TestConsoleServesItsFilesAndOnlyReadableTopics: /ui/ and its pages
// answer the console's HTML (permalinks included) with no credentials and
// a same-origin-only policy; /v1/console/ needs credentials once
// authentication is on, and its topic list holds only the topics the
// caller may read, with the schema of a subject named like the topic.
func TestConsoleServesItsFilesAndOnlyReadableTopics(t *testing.T) {
	s, conn, ctx, root := serverWithRoot(t)
	defer s.Close()
	for _, topic := range []string{"orders", "secret"} {
		if _, err := orderlogpb.NewAdminClient(conn).CreateTopic(as(ctx, root), &orderlogpb.CreateTopicRequest{Name: topic}); err != nil {
			t.Fatal(err)
		}
	}
	alice := tokenWithACLs(as(ctx, root), t, conn, "alice", &orderlogpb.AclEntry{Principal: "alice", Topic: "orders", Operation: "read"})
	base := "http://" + s.HTTPAddr()
	bearer := func(token string) map[string]string { return map[string]string{"Authorization": "Bearer " + token} }
	waitFor(t, 10*time.Second, "alice's token", func() bool {
		code, _, _ := httpDo(t, "GET", base+"/v1/console/session", "", bearer(alice))
		return code == 200
	})
	code, _, body := httpDo(t, "POST", base+"/v1/schemas/subjects/orders/versions", `{"schema":"\"string\""}`, bearer(root))
	if code != 200 {
		t.Fatalf("register a schema: %d %s", code, body)
	}
	for _, c := range []struct {
		path, token string
		want        int
		fragment    string
		absent      string
	}{
		{"/ui/", "", 200, `<script src="/ui/static/app.js"`, ""},
		{"/ui/messages?offset=3&topic=orders&key=k", "", 200, `<main id="main"`, ""},
		{"/ui/static/app.js", "", 200, "function messagesPage", ""},
		{"/ui/static/nope.js", "", 404, "", ""},
		{"/ui/admin", "", 404, "", ""},
		{"/v1/console/topics", "", 401, "UNAUTHENTICATED", ""},
		{"/v1/console/session", alice, 200, `"principal":"alice"`, ""},
		{"/v1/console/topics", alice, 200, `"name":"orders","partitions":16,"cleanup_policy":"delete"`, "secret"},
		{"/v1/console/topics", alice, 200, `"schema_format":"AVRO","schema_version":1,"schema_id":1`, ""},
		{"/v1/console/topics", root, 200, `"name":"secret"`, ""},
	} {
		header := map[string]string{}
		if c.token != "" {
			header = bearer(c.token)
		}
		code, _, body := httpDo(t, "GET", base+c.path, "", header)
		if code != c.want || !strings.Contains(body, c.fragment) || (c.absent != "" && strings.Contains(body, c.absent)) {
			t.Errorf("GET %s: %d %s, want %d with %q and without %q", c.path, code, body, c.want, c.fragment, c.absent)
		}
	}
	resp, err := http.Get(base + "/ui/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "default-src 'none'") {
		t.Errorf("Content-Security-Policy %q: want same-origin scripts only", csp)
	}
}
