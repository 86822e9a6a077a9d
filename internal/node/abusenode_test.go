package node

import (
	"context"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"orderlog/internal/apierr"
	"orderlog/proto/orderlogpb"
)

// abuseNode is an in-process node with authentication on: root, and a
// token for each principal with produce and read on every topic.
type abuseNode struct {
	s      *Server
	conn   *grpc.ClientConn // from 127.0.0.1
	ctx    context.Context
	root   string
	tokens map[string]string
	logs   *logLines
}

// logLines keeps the node's log lines (and writes them to the test's
// output) for tests that look for audit lines.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) matching(parts ...string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
next:
	for _, line := range l.lines {
		for _, p := range parts {
			if !strings.Contains(line, p) {
				continue next
			}
		}
		out = append(out, line)
	}
	return out
}

func startAbuseNode(t *testing.T, cfg Config, principals ...string) *abuseNode {
	t.Helper()
	logs := &logLines{}
	out := t.Output()
	cfg.DataDir, cfg.GRPCAddr, cfg.HTTPAddr = t.TempDir(), "127.0.0.1:0", "127.0.0.1:0"
	cfg.Logger = slog.New(slog.NewTextHandler(lineWriter(func(line string) {
		logs.mu.Lock()
		logs.lines = append(logs.lines, line)
		logs.mu.Unlock()
		_, _ = io.WriteString(out, line)
	}), &slog.HandlerOptions{Level: slog.LevelDebug}))
	s, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	if err := s.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	n := &abuseNode{s: s, conn: grpcConn(t, s), ctx: ctx, tokens: map[string]string{}, logs: logs}
	authc := orderlogpb.NewAuthClient(n.conn)
	resp, err := authc.CreateToken(ctx, &orderlogpb.CreateTokenRequest{Principal: "root", Admin: true})
	if err != nil {
		t.Fatal(err)
	}
	n.root = resp.Secret
	waitFor(t, 10*time.Second, "authentication to be on", func() bool { // the node's watch sees the token
		_, err := orderlogpb.NewAdminClient(n.conn).Status(ctx, &orderlogpb.StatusRequest{})
		return codeOf(err) == apierr.Unauthenticated
	})
	for _, p := range principals {
		resp, err := authc.CreateToken(as(ctx, n.root), &orderlogpb.CreateTokenRequest{Principal: p})
		if err != nil {
			t.Fatal(err)
		}
		for _, op := range []string{"produce", "read"} {
			if _, err := authc.AddAcl(as(ctx, n.root), &orderlogpb.AclEntry{Principal: p, Topic: "*", Operation: op}); err != nil {
				t.Fatal(err)
			}
		}
		n.tokens[p] = resp.Secret
	}
	// The node learns tokens and ACLs through its etcd watch: wait until
	// each principal's last ACL (read, added after produce) applies, or a
	// test's first frame may be refused.
	for _, p := range principals {
		waitFor(t, 10*time.Second, p+"'s ACLs to apply", func() bool {
			stream, err := orderlogpb.NewReaderClient(n.conn).Query(n.as(p), &orderlogpb.QueryRequest{Topic: "t", Limit: 1})
			if err == nil {
				_, err = stream.Recv()
			}
			return codeOf(err) != apierr.PermissionDenied && codeOf(err) != apierr.Unauthenticated
		})
		n.waitStreamsEnded(t, p)
	}
	return n
}

// waitStreamsEnded waits until the node counts none of principal's
// streams against its limit: streams a test closed without reading them
// to their end (produceOne, the ACL check above) end on the server a
// moment later, and a test about to open streams up to the limit must not
// find some of its budget still taken.
func (n *abuseNode) waitStreamsEnded(t *testing.T, principal string) {
	t.Helper()
	waitFor(t, 10*time.Second, principal+"'s earlier streams to end", func() bool {
		return n.s.auth.holdings.streams.Held(principal) == 0
	})
}

// as is the node's context with principal's token.
func (n *abuseNode) as(principal string) context.Context { return as(n.ctx, n.tokens[principal]) }

// produce logs one frame of one small message as principal on conn and
// returns its answer's code ("" when logged).
func (n *abuseNode) produce(t *testing.T, conn *grpc.ClientConn, principal string) apierr.Code {
	t.Helper()
	return produceOne(n.as(principal), t, conn, &orderlogpb.ProduceRequest{Messages: []*orderlogpb.Message{{Topic: "t", Value: []byte(principal)}}})
}

// refusals reads orderlog_limit_refusals_total{limit} from /metrics.
func (n *abuseNode) refusals(t *testing.T, limit string) int {
	t.Helper()
	_, body := httpGet(t, n.s, "/metrics")
	prefix := `orderlog_limit_refusals_total{limit="` + limit + `"} `
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, prefix); ok {
			count, _ := strconv.ParseFloat(v, 64)
			return int(count)
		}
	}
	return 0
}

// dialFrom connects to the node's gRPC port from a loopback address of its
// own (127.0.0.0/8 is all loopback): the node sees another client address.
func dialFrom(t *testing.T, s *Server, local string) *grpc.ClientConn {
	t.Helper()
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}
	conn, err := grpc.NewClient("passthrough:///"+s.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) { return dialer.DialContext(ctx, "tcp", addr) }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// queryCount reads topic to the committed watermark as root and counts its
// messages.
func queryCount(t *testing.T, n *abuseNode, topic string) int {
	t.Helper()
	stream, err := orderlogpb.NewReaderClient(n.conn).Query(as(n.ctx, n.root), &orderlogpb.QueryRequest{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	count := 0
	for {
		page, err := stream.Recv()
		if err == io.EOF {
			return count
		}
		if err != nil {
			t.Fatalf("query %s: %v", topic, err)
		}
		count += len(page.Messages)
	}
}
