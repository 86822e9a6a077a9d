package node

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"orderlog/internal/apierr"
	"orderlog/proto/orderlogpb"
)

// as is ctx carrying a bearer token.
func as(ctx context.Context, token string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
}

// codeOf is the API code of a gRPC error ("" for nil).
func codeOf(err error) apierr.Code {
	if err == nil {
		return ""
	}
	return apierr.FromGRPC(err).Code
}

// produceOne sends one frame on a Produce stream and returns its answer's
// error code ("" when logged). The stream is cancelled once answered, not
// read to its end (a refused one is held back up to a second first, which
// would slow the quota tests' loops): the server may still count it
// against the principal's stream limit for a moment (see
// abuseNode.waitStreamsEnded), but not for the hold-back.
func produceOne(ctx context.Context, t *testing.T, conn *grpc.ClientConn, req *orderlogpb.ProduceRequest) apierr.Code {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := orderlogpb.NewProducerClient(conn).Produce(ctx)
	if err != nil {
		return codeOf(err)
	}
	if err := stream.Send(req); err != nil && !errors.Is(err, io.EOF) { // EOF: the status comes with Recv
		return codeOf(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		return codeOf(err)
	}
	_ = stream.CloseSend()
	return apierr.Code(resp.ErrorCode)
}

// streamCode opens a server stream and returns the code of its first
// answer's error ("" if it answers or ends cleanly).
func streamCode[T any](stream interface{ Recv() (T, error) }, err error) apierr.Code {
	if err != nil {
		return codeOf(err)
	}
	_, err = stream.Recv()
	if errors.Is(err, io.EOF) {
		return ""
	}
	return codeOf(err)
}

// TestEveryPublicCallNeedsItsCredentials: once a token exists, calls
// without one, with a bad or revoked one, or without the topic's ACL are
// refused with UNAUTHENTICATED or PERMISSION_DENIED on every path
// (produce, read, tail, query, consume, admin; gRPC and HTTP), nothing of
// a refused produce is logged, and the server goes on serving.
func TestEveryPublicCallNeedsItsCredentials(t *testing.T) {
	s, conn, ctx, root := serverWithRoot(t)
	defer s.Close()
	authc := orderlogpb.NewAuthClient(conn)
	admin := orderlogpb.NewAdminClient(conn)
	waitFor(t, 10*time.Second, "authentication to turn on", func() bool {
		_, err := admin.Status(ctx, &orderlogpb.StatusRequest{})
		return codeOf(err) == apierr.Unauthenticated
	})
	newToken := func(principal string) string {
		resp, err := authc.CreateToken(as(ctx, root), &orderlogpb.CreateTokenRequest{Principal: principal})
		if err != nil {
			t.Fatal(err)
		}
		return resp.Secret
	}
	alice, bob := newToken("alice"), newToken("bob")
	if _, err := admin.CreateTopic(as(ctx, root), &orderlogpb.CreateTopicRequest{Name: "orders"}); err != nil {
		t.Fatal(err)
	}
	for _, e := range []*orderlogpb.AclEntry{
		{Principal: "alice", Topic: "orders", Operation: "produce"},
		{Principal: "alice", Topic: "orders", Operation: "read"},
		{Principal: "bob", Topic: "orders", Operation: "produce"},
	} {
		if _, err := authc.AddAcl(as(ctx, root), e); err != nil {
			t.Fatal(err)
		}
	}
	revoked := newToken("mallory")
	list, err := authc.ListTokens(as(ctx, root), &orderlogpb.ListTokensRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range list.Tokens {
		if tok.Principal == "mallory" {
			if _, err := authc.RevokeToken(as(ctx, root), &orderlogpb.RevokeTokenRequest{Id: tok.Id}); err != nil {
				t.Fatal(err)
			}
		}
	}
	waitFor(t, 10*time.Second, "the ACLs and the revocation to apply", func() bool {
		_, errRevoked := admin.Status(as(ctx, revoked), &orderlogpb.StatusRequest{})
		_, errAlice := admin.ListPartitions(as(ctx, alice), &orderlogpb.ListPartitionsRequest{Topic: "orders"})
		return codeOf(errRevoked) == apierr.Unauthenticated && errAlice == nil
	})
	msg := func(topic string) *orderlogpb.ProduceRequest {
		return &orderlogpb.ProduceRequest{Messages: []*orderlogpb.Message{{Topic: topic, Value: []byte("v-" + topic)}}}
	}
	unauth, denied := apierr.Unauthenticated, apierr.PermissionDenied
	cases := []struct {
		name string
		got  apierr.Code
		want apierr.Code
	}{
		{"status without a token", codeOf(func() error { _, e := admin.Status(ctx, &orderlogpb.StatusRequest{}); return e }()), unauth},
		{"status with garbage", codeOf(func() error { _, e := admin.Status(as(ctx, "olt_nonsense"), &orderlogpb.StatusRequest{}); return e }()), unauth},
		{"status with a revoked token", codeOf(func() error { _, e := admin.Status(as(ctx, revoked), &orderlogpb.StatusRequest{}); return e }()), unauth},
		{"produce without a token", produceOne(ctx, t, conn, msg("orders")), unauth},
		{"produce to a topic without the ACL", produceOne(as(ctx, alice), t, conn, msg("secret")), denied},
		{"produce with the ACL", produceOne(as(ctx, alice), t, conn, msg("orders")), ""},
		{"read the whole log", streamCode(orderlogpb.NewReaderClient(conn).Read(as(ctx, alice), &orderlogpb.ReadRequest{Limit: 1})), denied},
		{"tail the whole log", streamCode(orderlogpb.NewReaderClient(conn).Tail(as(ctx, alice), &orderlogpb.TailRequest{})), denied},
		{"query another topic", streamCode(orderlogpb.NewReaderClient(conn).Query(as(ctx, alice), &orderlogpb.QueryRequest{Topic: "secret"})), denied},
		{"query a readable topic", streamCode(orderlogpb.NewReaderClient(conn).Query(as(ctx, alice), &orderlogpb.QueryRequest{Topic: "orders"})), ""},
		{"query without read", streamCode(orderlogpb.NewReaderClient(conn).Query(as(ctx, bob), &orderlogpb.QueryRequest{Topic: "orders"})), denied},
		{"create a topic", codeOf(func() error {
			_, e := admin.CreateTopic(as(ctx, alice), &orderlogpb.CreateTopicRequest{Name: "new"})
			return e
		}()), denied},
		{"manage tokens", codeOf(func() error {
			_, e := authc.ListTokens(as(ctx, alice), &orderlogpb.ListTokensRequest{})
			return e
		}()), denied},
	}
	consume := func(ctx context.Context, topic string) apierr.Code {
		stream, err := orderlogpb.NewConsumerClient(conn).Consume(ctx)
		if err != nil {
			return codeOf(err)
		}
		if err := stream.Send(&orderlogpb.ConsumeRequest{Request: &orderlogpb.ConsumeRequest_Join{Join: &orderlogpb.JoinGroup{Group: "g", Topics: []string{topic}}}}); err != nil && !errors.Is(err, io.EOF) {
			return codeOf(err)
		}
		_, err = stream.Recv()
		return codeOf(err)
	}
	cases = append(cases,
		struct {
			name string
			got  apierr.Code
			want apierr.Code
		}{"consume another topic", consume(as(ctx, alice), "secret"), denied},
		struct {
			name string
			got  apierr.Code
			want apierr.Code
		}{"consume a readable topic", consume(as(ctx, alice), "orders"), ""},
	)
	for _, c := range cases {
		if c.got != c.want {
			t.Errorf("%s: %q, want %q", c.name, c.got, c.want)
		}
	}
	// a producer session is bound to its principal
	p, err := orderlogpb.NewProducerClient(conn).InitProducer(as(ctx, alice), &orderlogpb.InitProducerRequest{Name: "alice-app"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := orderlogpb.NewProducerClient(conn).InitProducer(as(ctx, bob), &orderlogpb.InitProducerRequest{Name: "alice-app"}); codeOf(err) != denied {
		t.Errorf("bob's InitProducer of alice's producer: %v", err)
	}
	hijack := msg("orders")
	hijack.ProducerId, hijack.Epoch = p.ProducerId, p.Epoch
	if code := produceOne(as(ctx, bob), t, conn, hijack); code != denied {
		t.Errorf("bob's frame on alice's session: %q", code)
	}
	if code := produceOne(as(ctx, alice), t, conn, hijack); code != "" {
		t.Errorf("alice's own frame: %q", code)
	}
	// HTTP: 401 without credentials, 403 without the ACL, 200 with it
	base := "http://" + s.HTTPAddr()
	for _, h := range []struct {
		method, path, body, token string
		want                      int
	}{
		{"GET", "/v1/status", "", "", 401},
		{"POST", "/v1/messages", `{"topic":"secret","payload":1}`, alice, 403},
		{"POST", "/v1/messages", `{"topic":"orders","payload":1}`, alice, 200},
		{"GET", "/v1/messages?topic=secret", "", alice, 403},
		{"GET", "/v1/messages", "", alice, 403},
		{"GET", "/v1/messages?topic=orders", "", alice, 200},
		{"POST", "/v1/topics", `{"name":"x"}`, alice, 403},
		{"GET", "/v1/consumers/g/stream?topic=secret", "", alice, 403},
	} {
		header := map[string]string{}
		if h.token != "" {
			header["Authorization"] = "Bearer " + h.token
		}
		if code, _, body := httpDo(t, h.method, base+h.path, h.body, header); code != h.want {
			t.Errorf("HTTP %s %s: %d, want %d: %s", h.method, h.path, code, h.want, body)
		}
	}
	// nothing refused was logged: root reads every message, none of "secret"
	waitFor(t, 10*time.Second, "C to pass the acknowledged messages", func() bool {
		st, err := admin.Status(as(ctx, root), &orderlogpb.StatusRequest{})
		return err == nil && st.Committed >= 3
	})
	var all []*orderlogpb.StoredMessage
	stream, err := orderlogpb.NewReaderClient(conn).Read(as(ctx, root), &orderlogpb.ReadRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for {
		page, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, page.Messages...)
	}
	for _, m := range all {
		if m.Message.Topic != "orders" {
			t.Fatalf("a refused message was logged: %v", m)
		}
	}
	if len(all) != 3 {
		t.Fatalf("root reads %d messages, want the 3 allowed ones", len(all))
	}
	_, _, metrics := httpDo(t, "GET", base+"/metrics", "", nil)
	for _, want := range []string{`orderlog_auth_failures_total{reason="missing"}`, `orderlog_auth_denied_total{operation="produce"}`, `orderlog_auth_denied_total{operation="read"}`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// TestAPrincipalOverItsQuotaIsHeldBackAlone: a principal over its produce
// quota gets QUOTA_EXCEEDED with a retry-after (gRPC and HTTP 429) while
// another principal's frames pass; one over its read quota reads at its
// rate, and gets everything.
func TestAPrincipalOverItsQuotaIsHeldBackAlone(t *testing.T) {
	s, conn, ctx, root := serverWithRoot(t)
	defer s.Close()
	authc := orderlogpb.NewAuthClient(conn)
	token := func(principal string) string {
		resp, err := authc.CreateToken(as(ctx, root), &orderlogpb.CreateTokenRequest{Principal: principal})
		if err != nil {
			t.Fatal(err)
		}
		for _, op := range []string{"produce", "read"} {
			if _, err := authc.AddAcl(as(ctx, root), &orderlogpb.AclEntry{Principal: principal, Topic: "*", Operation: op}); err != nil {
				t.Fatal(err)
			}
		}
		return resp.Secret
	}
	abuser, good := token("abuser"), token("good")
	if _, err := authc.SetQuota(as(ctx, root), &orderlogpb.Quota{Principal: "abuser", ProduceBytesPerSec: 20_000, ReadBytesPerSec: 100_000}); err != nil {
		t.Fatal(err)
	}
	big := &orderlogpb.ProduceRequest{Messages: []*orderlogpb.Message{{Topic: "t", Value: make([]byte, 10_000)}}}
	waitFor(t, 10*time.Second, "the quota to apply", func() bool {
		return produceOne(as(ctx, abuser), t, conn, big) == apierr.QuotaExceeded
	})
	refused := 0
	for range 20 {
		if produceOne(as(ctx, abuser), t, conn, big) == apierr.QuotaExceeded {
			refused++
		}
		if code := produceOne(as(ctx, good), t, conn, big); code != "" {
			t.Fatalf("the good principal's frame: %q", code)
		}
	}
	if refused < 10 {
		t.Fatalf("only %d of 20 frames over the quota were refused", refused)
	}
	code, _, body := httpDo(t, "POST", "http://"+s.HTTPAddr()+"/v1/messages", `{"topic":"t","payload":"`+strings.Repeat("x", 30_000)+`"}`,
		map[string]string{"Authorization": "Bearer " + abuser})
	if code != 429 || !strings.Contains(body, "QUOTA_EXCEEDED") {
		t.Fatalf("HTTP over the quota: %d %s", code, body)
	}
	// the abuser reads ~200 KB at once (its bucket goes into debt); its
	// next read is refused until the bucket refills, the good one's is not
	waitFor(t, 10*time.Second, "the produced messages to be committed", func() bool {
		st, err := orderlogpb.NewAdminClient(conn).Status(as(ctx, root), &orderlogpb.StatusRequest{})
		return err == nil && st.Committed >= 20
	})
	time.Sleep(1100 * time.Millisecond) // the read bucket is full again
	query := func(token string) (int, error) {
		stream, err := orderlogpb.NewReaderClient(conn).Query(as(ctx, token), &orderlogpb.QueryRequest{Topic: "t"})
		if err != nil {
			return 0, err
		}
		got := 0
		for {
			page, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				return got, nil
			}
			if err != nil {
				return got, err
			}
			got += len(page.Messages)
		}
	}
	begin := time.Now()
	if n, err := query(abuser); err != nil || n < 20 {
		t.Fatalf("the abuser's first read: %d messages, %v", n, err)
	}
	// ~200 KB sent on a full 100 KB bucket: the stream waits out the debt
	if took := time.Since(begin); took < 800*time.Millisecond {
		t.Fatalf("the abuser read ~200 KB in %v under a 100 KB/s quota", took)
	}
	begin = time.Now()
	if n, err := query(good); err != nil || n < 20 || time.Since(begin) > 800*time.Millisecond {
		t.Fatalf("the good principal's read: %d messages in %v, %v", n, time.Since(begin), err)
	}
	// back to back, the abuser's reads keep to the quota: the next one is
	// refused at its start or slowed down
	begin = time.Now()
	_, err1 := query(abuser)
	_, err2 := query(abuser)
	for _, err := range []error{err1, err2} {
		if err != nil && codeOf(err) != apierr.QuotaExceeded {
			t.Fatalf("the abuser's next reads: %v", err)
		}
	}
	if err1 == nil && err2 == nil && time.Since(begin) < 800*time.Millisecond {
		t.Fatalf("two more reads of ~200 KB each in %v under a 100 KB/s quota", time.Since(begin))
	}
	waitFor(t, 10*time.Second, "the abuser's bucket to refill", func() bool { _, err := query(abuser); return err == nil })
}

// serverWithRoot starts a server and makes its first administrator,
// "root", whose token it returns with a connection and a context.
func serverWithRoot(t *testing.T) (*Server, *grpc.ClientConn, context.Context, string) {
	t.Helper()
	s := startServer(t, t.TempDir())
	conn := grpcConn(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	resp, err := orderlogpb.NewAuthClient(conn).CreateToken(ctx, &orderlogpb.CreateTokenRequest{Principal: "root", Admin: true})
	if err != nil {
		s.Close()
		t.Fatal(err)
	}
	return s, conn, ctx, resp.Secret
}

// tokenWithACLs creates a token for principal as the caller of ctx (an
// admin) and adds acls; it returns the token's secret.
func tokenWithACLs(ctx context.Context, t *testing.T, conn *grpc.ClientConn, principal string, acls ...*orderlogpb.AclEntry) string {
	t.Helper()
	authc := orderlogpb.NewAuthClient(conn)
	resp, err := authc.CreateToken(ctx, &orderlogpb.CreateTokenRequest{Principal: principal})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range acls {
		if _, err := authc.AddAcl(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	return resp.Secret
}

// TestTheHolesAReviewFoundAreShut: a group name with an encoded slash, a
// HEAD request, a group commit over HTTP and a produce frame carrying a
// group commit all need the read ACL of their topics, as the plain paths
// do.
func TestTheHolesAReviewFoundAreShut(t *testing.T) {
	s, conn, ctx, root := serverWithRoot(t)
	defer s.Close()
	token := func(principal string, acls ...*orderlogpb.AclEntry) string {
		return tokenWithACLs(as(ctx, root), t, conn, principal, acls...)
	}
	for _, topic := range []string{"secret", "bobs"} {
		if _, err := orderlogpb.NewAdminClient(conn).CreateTopic(as(ctx, root), &orderlogpb.CreateTopicRequest{Name: topic}); err != nil {
			t.Fatal(err)
		}
	}
	mallory := token("mallory")
	bob := token("bob", &orderlogpb.AclEntry{Principal: "bob", Topic: "bobs", Operation: "produce"})
	waitFor(t, 10*time.Second, "the tokens", func() bool {
		_, err := orderlogpb.NewAdminClient(conn).Status(as(ctx, bob), &orderlogpb.StatusRequest{})
		return err == nil
	})
	base := "http://" + s.HTTPAddr()
	for _, h := range []struct{ method, path, body string }{
		{"GET", "/v1/consumers/x%2Fy/stream?topic=secret", ""},
		{"HEAD", "/v1/consumers/h/stream?topic=secret", ""},
		{"HEAD", "/v1/messages?topic=secret", ""},
		{"POST", "/v1/consumers/x%2Fy/offsets", `{"member_id":"m","generation":1,"offsets":[{"topic":"secret","partition":0,"offset":5}]}`},
	} {
		code, _, body := httpDo(t, h.method, base+h.path, h.body, map[string]string{"Authorization": "Bearer " + mallory})
		if code != 403 {
			t.Errorf("HTTP %s %s without the ACL: %d %s", h.method, h.path, code, body)
		}
	}
	p, err := orderlogpb.NewProducerClient(conn).InitProducer(as(ctx, bob), &orderlogpb.InitProducerRequest{Name: "bob-app"})
	if err != nil {
		t.Fatal(err)
	}
	frame := &orderlogpb.ProduceRequest{ProducerId: p.ProducerId, Epoch: p.Epoch,
		Messages:    []*orderlogpb.Message{{Topic: "bobs", Value: []byte("x")}},
		GroupCommit: &orderlogpb.GroupCommit{Group: "billing", MemberId: "m", Generation: 1, Offsets: []*orderlogpb.PartitionOffset{{Topic: "secret", Partition: 0, Offset: 1000000}}}}
	if code := produceOne(as(ctx, bob), t, conn, frame); code != apierr.PermissionDenied {
		t.Errorf("a frame committing a group's offsets in a topic bob may not read: %q", code)
	}
	frame.GroupCommit = nil
	if code := produceOne(as(ctx, bob), t, conn, frame); code != "" {
		t.Errorf("the same frame without the commit: %q", code)
	}
}
