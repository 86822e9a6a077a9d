package node

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"orderlog/ingest"
	"orderlog/internal/etcdserver"
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
	// The token and the ACL reach the node through separate etcd watches:
	// wait for the ACL, which shows as alice's topic list holding orders.
	waitFor(t, 10*time.Second, "alice's token and ACL", func() bool {
		code, _, body := httpDo(t, "GET", base+"/v1/console/topics", "", bearer(alice))
		return code == 200 && strings.Contains(body, `"name":"orders"`)
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

// TestConsoleListsOnlyWhatTheCallerMaySee: the console's listings of
// consumer groups, producers and the archive show each caller only what
// it may read. A group is listed to a caller who may read all its topics,
// a page at a time with a cursor, a group whose keys do not decode left
// out and counted;
// producers are listed to their own principal, all of them to an
// administrator, a page at a time with a cursor; the archive needs read on
// every topic, and a node without one says so.
func TestConsoleListsOnlyWhatTheCallerMaySee(t *testing.T) {
	s, conn, ctx, root := serverWithRoot(t)
	defer s.Close()
	for _, topic := range []string{"orders", "secret"} {
		if _, err := orderlogpb.NewAdminClient(conn).CreateTopic(as(ctx, root), &orderlogpb.CreateTopicRequest{Name: topic}); err != nil {
			t.Fatal(err)
		}
	}
	alice := tokenWithACLs(as(ctx, root), t, conn, "alice", &orderlogpb.AclEntry{Principal: "alice", Topic: "orders", Operation: "read"},
		&orderlogpb.AclEntry{Principal: "alice", Topic: "orders", Operation: "produce"})
	auditor := tokenWithACLs(as(ctx, root), t, conn, "auditor", &orderlogpb.AclEntry{Principal: "auditor", Topic: "*", Operation: "read"})
	base := "http://" + s.HTTPAddr()
	bearer := func(token string) map[string]string { return map[string]string{"Authorization": "Bearer " + token} }
	// Tokens and ACLs reach the node through etcd watches, in the order
	// written: the auditor's ACL, written last, shows as its archive access.
	waitFor(t, 10*time.Second, "the tokens and ACLs", func() bool {
		code, _, _ := httpDo(t, "GET", base+"/v1/console/archive", "", bearer(auditor))
		return code == 200
	})
	for group, topic := range map[string]string{"g-orders": "orders", "g-secret": "secret"} {
		holdGroupMembership(as(ctx, root), t, conn, group, topic)
	}
	for _, p := range []struct{ token, name string }{{alice, "alice-app"}, {root, "root-app"}, {root, "root-other"}} {
		if code, _, body := httpDo(t, "POST", base+"/v1/producers", `{"name":"`+p.name+`"}`, bearer(p.token)); code != 200 {
			t.Fatalf("init producer %s: %d %s", p.name, code, body)
		}
	}
	// A group whose state does not decode is left out of the list and counted.
	if _, err := s.cli.Put(ctx, "orderlog/groups/g-broken/state", "not json"); err != nil {
		t.Fatal(err)
	}
	h := bearer(alice)
	h["Producer-Id"], h["Producer-Epoch"], h["Producer-Seq"] = "1", "1", "0"
	if code, _, body := httpDo(t, "POST", base+"/v1/messages", `{"topic":"orders","payload":1}`, h); code != 200 {
		t.Fatalf("produce as alice-app: %d %s", code, body)
	}

	for _, c := range []struct {
		path, token string
		want        int
		fragments   []string
		absent      []string
	}{
		{"/v1/console/groups", "", 401, []string{"UNAUTHENTICATED"}, nil},
		{"/v1/console/groups", alice, 200, []string{`"group":"g-orders","generation":1,"members":1,"topics":["orders"],"partitions":16`}, []string{"g-secret"}},
		{"/v1/console/groups", root, 200, []string{`"group":"g-orders"`, `"group":"g-secret"`, `"undecodable":1`}, []string{"g-broken", "next_after"}},
		// Pages of groups by name: g-broken (left out), g-orders, g-secret.
		{"/v1/console/groups?limit=2", root, 200, []string{`"group":"g-orders"`, `"next_after":"g-orders"`, `"undecodable":1`}, []string{"g-secret"}},
		{"/v1/console/groups?after=g-orders&limit=2", root, 200, []string{`"group":"g-secret"`}, []string{"g-orders", "next_after", "undecodable"}},
		{"/v1/console/groups?after=g-orders", alice, 200, []string{`"groups":[]`}, []string{"g-secret", "next_after"}},
		{"/v1/console/groups?limit=0", root, 400, []string{"INVALID_ARGUMENT"}, nil},
		{"/v1/console/groups?limit=100000", root, 400, []string{"LIMIT_TOO_LARGE"}, nil},
		// A group's description follows the list: read on every topic it names.
		{"/v1/consumers/g-orders", alice, 200, []string{`"group":"g-orders"`}, nil},
		{"/v1/consumers/g-secret", alice, 403, []string{"PERMISSION_DENIED"}, []string{"secret\",\"partition"}},
		{"/v1/consumers/g-secret", root, 200, []string{`"group":"g-secret"`}, nil},
		{"/v1/console/producers", "", 401, []string{"UNAUTHENTICATED"}, nil},
		{"/v1/console/producers", alice, 200, []string{`"id":1,"name":"alice-app","epoch":1`, `"owner_live":true,"owned_here":true,"principal":"alice","last_durable_seq":0`,
			`"all_principals":false`}, []string{"root-app", "next_after"}},
		{"/v1/console/producers", auditor, 200, []string{`"producers":[]`}, []string{"alice-app"}},
		{"/v1/console/producers", root, 200, []string{"alice-app", "root-app", "root-other", `"all_principals":true`}, []string{"next_after"}},
		{"/v1/console/producers?limit=2", root, 200, []string{"alice-app", "root-app", `"next_after":2`}, []string{"root-other"}},
		{"/v1/console/producers?after=2&limit=2", root, 200, []string{"root-other"}, []string{"alice-app", "next_after"}},
		{"/v1/console/producers?limit=0", root, 400, []string{"INVALID_ARGUMENT"}, nil},
		{"/v1/console/producers?limit=100000", root, 400, []string{"LIMIT_TOO_LARGE"}, nil},
		{"/v1/console/archive", "", 401, []string{"UNAUTHENTICATED"}, nil},
		{"/v1/console/archive", alice, 403, []string{"PERMISSION_DENIED"}, []string{"enabled"}},
		{"/v1/console/archive", auditor, 200, []string{`"enabled":false`, "--archive none"}, nil},
		{"/v1/console/archive", root, 200, []string{`"enabled":false`}, nil},
	} {
		header := map[string]string{}
		if c.token != "" {
			header = bearer(c.token)
		}
		code, _, body := httpDo(t, "GET", base+c.path, "", header)
		ok := code == c.want
		for _, f := range c.fragments {
			ok = ok && strings.Contains(body, f)
		}
		for _, a := range c.absent {
			ok = ok && !strings.Contains(body, a)
		}
		if !ok {
			t.Errorf("GET %s as %s: %d %s\nwant %d with %q and without %q", c.path, principalOf(c.token, alice, auditor, root), code, body, c.want, c.fragments, c.absent)
		}
	}
}

func principalOf(token, alice, auditor, root string) string {
	switch token {
	case alice:
		return "alice"
	case auditor:
		return "auditor"
	case root:
		return "root"
	}
	return "nobody"
}

// holdGroupMembership joins group on topic over a gRPC Consume stream and
// holds the membership until the test ends.
func holdGroupMembership(ctx context.Context, t *testing.T, conn *grpc.ClientConn, group, topic string) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	stream, err := orderlogpb.NewConsumerClient(conn).Consume(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&orderlogpb.ConsumeRequest{Request: &orderlogpb.ConsumeRequest_Join{Join: &orderlogpb.JoinGroup{Group: group, Topics: []string{topic}}}}); err != nil {
		t.Fatal(err)
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("join %s: %v", group, err)
		}
		if resp.GetAssignment() != nil {
			return
		}
	}
}

// TestConsoleSessionOfANodeWithoutTheAPI: a node without the ingest role
// serves the console but not /v1/status; its session says so by its roles
// and names the ingest nodes' gRPC addresses, for the console to send the
// user there.
func TestConsoleSessionOfANodeWithoutTheAPI(t *testing.T) {
	etcd, err := etcdserver.Start(etcdserver.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer etcd.Close()
	in := startClusterNode(t, etcd, Roles{Ingest: true}, ingest.AckQuorum)
	defer in.Close()
	seq := startClusterNode(t, etcd, Roles{Sequencer: true}, ingest.AckQuorum)
	defer seq.Close()
	base := "http://" + seq.HTTPAddr()
	if code, _, body := httpDo(t, "GET", base+"/v1/status", "", nil); code != 404 {
		t.Errorf("GET /v1/status on a sequencer-only node: %d %s, want 404", code, body)
	}
	if code, _, _ := httpDo(t, "GET", base+"/ui/", "", nil); code != 200 {
		t.Errorf("GET /ui/ on a sequencer-only node: %d, want the console", code)
	}
	want := `"roles":["sequencer"],"ingest_endpoints":["` + in.GRPCAddr() + `"]`
	waitFor(t, 10*time.Second, "the ingest node's address in the session", func() bool {
		_, _, body := httpDo(t, "GET", base+"/v1/console/session", "", nil)
		return strings.Contains(body, want)
	})
	if _, _, body := httpDo(t, "GET", "http://"+in.HTTPAddr()+"/v1/console/session", "", nil); strings.Contains(body, "ingest_endpoints") {
		t.Errorf("an ingest node's session names ingest endpoints: %s", body)
	}
}
