package node

import (
	"cmp"
	"context"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/protobuf/proto"

	"orderlog/ingest/httpapi"
	"orderlog/internal/apierr"
	"orderlog/internal/auth"
	"orderlog/proto/orderlogpb"
)

// AuthConfig says when calls need credentials.
type AuthConfig struct {
	// Required turns authentication on even while no token or ACL exists
	// (--auth required); otherwise it is on once one does.
	Required bool
}

// authGuard authenticates calls to the public services and checks their
// ACLs (docs/security.md). The internal services (WAL stores, grants,
// commit maps, peers) are not its business: mTLS between nodes is.
type authGuard struct {
	cfg      AuthConfig
	watcher  *auth.Watcher
	limiter  *auth.Limiter
	holdings *holdings              // what principals and addresses hold open (limits.go)
	logger   *slog.Logger           // audit lines of the admin calls it sees (topic changes)
	throttle *prometheus.CounterVec // quota refusals and delays, by direction
	failures *prometheus.CounterVec // by reason
	denied   *prometheus.CounterVec // by operation
}

func newAuthGuard(ctx context.Context, cli *clientv3.Client, cfg AuthConfig, limits Limits, logger *slog.Logger) (*authGuard, error) {
	w, err := auth.NewWatcher(ctx, auth.NewStore(cli))
	if err != nil {
		return nil, err
	}
	go w.Run(ctx)
	return &authGuard{cfg: cfg, watcher: w, limiter: auth.NewLimiter(), holdings: newHoldings(limits), logger: logger,
		throttle: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "orderlog_quota_throttled_total",
			Help: "Produce frames refused (QUOTA_EXCEEDED) and read sends delayed for a principal over its quota, by direction."},
			[]string{"direction"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "orderlog_auth_failures_total",
			Help: "Calls refused for missing or bad credentials (UNAUTHENTICATED), by reason."}, []string{"reason"}),
		denied: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "orderlog_auth_denied_total",
			Help: "Calls refused by the ACLs (PERMISSION_DENIED), by operation."}, []string{"operation"}),
	}, nil
}

// enabled reports whether calls need credentials now.
func (g *authGuard) enabled() bool { return g.cfg.Required || g.watcher.Current().Enabled() }

// errUnauthenticated says nothing of what was wrong: no detail helps an
// attacker.
var errUnauthenticated = apierr.New(apierr.Unauthenticated, "missing or invalid credentials")

// authenticate finds the caller's principal from a bearer token or, failing
// that, a verified client certificate ("cert:" and its common name). It
// returns "" without error when authentication is off.
func (g *authGuard) authenticate(bearer string, tlsState *credentials.TLSInfo) (string, error) {
	if !g.enabled() {
		return "", nil
	}
	if bearer != "" {
		tok, err := auth.ParseBearer(bearer)
		if err != nil {
			g.failures.WithLabelValues("malformed").Inc()
			return "", errUnauthenticated
		}
		principal, ok := g.watcher.Current().Authenticate(tok)
		if !ok {
			g.failures.WithLabelValues("unknown_token").Inc()
			return "", errUnauthenticated
		}
		return principal, nil
	}
	if tlsState != nil && len(tlsState.State.VerifiedChains) > 0 {
		if cn := tlsState.State.VerifiedChains[0][0].Subject.CommonName; cn != "" {
			return "cert:" + cn, nil
		}
	}
	g.failures.WithLabelValues("missing").Inc()
	return "", errUnauthenticated
}

// allow refuses principal's op on each topic without the ACL ("" with
// authentication off allows everything).
func (g *authGuard) allow(principal string, op auth.Operation, topics ...string) error {
	if principal == "" {
		return nil
	}
	rules := g.watcher.Current().Rules
	for _, t := range topics {
		if !rules.Allows(principal, op, t) {
			g.denied.WithLabelValues(string(op)).Inc()
			return apierr.New(apierr.PermissionDenied, "%s on topic %q is not allowed", op, t)
		}
	}
	return nil
}

// allowEverywhere refuses a call that would return every topic's messages
// unless principal may read them all. A read without a topic filter is
// refused, not narrowed: a reader that may read some topics asks for them
// by name (docs/security.md).
func (g *authGuard) allowEverywhere(principal string, op auth.Operation) error {
	if principal == "" || g.watcher.Current().Rules.AllowsEverywhere(principal, op) {
		return nil
	}
	g.denied.WithLabelValues(string(op)).Inc()
	return apierr.New(apierr.PermissionDenied, "%s on every topic is not allowed: name a topic", op)
}

// Principal and MayProduce make the guard the ingest node's Authorizer.
func (g *authGuard) Principal(ctx context.Context) (string, error) {
	if p, ok := auth.PrincipalFrom(ctx); ok {
		return p, nil
	}
	if g.enabled() { // a path that skipped the interceptors: refuse rather than trust
		return "", errUnauthenticated
	}
	return "", nil
}

func (g *authGuard) MayProduce(principal, topic string) error {
	return g.allow(principal, auth.Produce, topic)
}

// ChargeProduce holds principal to its produce quota (ingest.ProduceQuota).
func (g *authGuard) ChargeProduce(principal string, bytes int) error {
	wait, ok := g.limiter.Produce(principal, g.watcher.Current().QuotaOf(principal), bytes)
	if ok {
		return nil
	}
	g.throttle.WithLabelValues("produce").Inc()
	return apierr.New(apierr.QuotaExceeded, "over the produce quota: retry in %v", wait.Round(time.Millisecond)).
		With("retry_after_ms", strconv.FormatInt(wait.Milliseconds()+1, 10))
}

// chargeRead holds principal to its read quota: a stream whose principal
// is over it waits before its next send (throttled, as Kafka does, rather
// than cut: a consumer group member would leave its group), and a new
// read is refused with QUOTA_EXCEEDED until the bucket refills.
func (g *authGuard) chargeRead(ctx context.Context, principal string, bytes int, start bool) error {
	wait, ok := g.limiter.Read(principal, g.watcher.Current().QuotaOf(principal), bytes)
	if wait == 0 || start && ok {
		return nil
	}
	g.throttle.WithLabelValues("read").Inc()
	if start {
		return apierr.New(apierr.QuotaExceeded, "over the read quota: retry in %v", wait.Round(time.Millisecond)).
			With("retry_after_ms", strconv.FormatInt(wait.Milliseconds()+1, 10))
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(wait):
		return nil
	}
}

// chargeReadCall is chargeRead for the caller in ctx (nothing without a
// principal).
func (g *authGuard) chargeReadCall(ctx context.Context, bytes int, start bool) error {
	principal, _ := auth.PrincipalFrom(ctx)
	if principal == "" {
		return nil
	}
	return g.chargeRead(ctx, principal, bytes, start)
}

// MayRead refuses principal's read of topic without the ACL: a produce
// frame that carries a group commit needs it for the commit's topics
// (ingest.ReadAuthorizer).
func (g *authGuard) MayRead(principal, topic string) error {
	return g.allow(principal, auth.Read, topic)
}

// publicService reports whether a gRPC method belongs to a client-facing
// service, the ones the guard covers.
func publicService(method string) bool {
	for _, prefix := range []string{"/orderlog.v1.", "/arrow.flight.protocol.FlightService/"} {
		if strings.HasPrefix(method, prefix) {
			return true
		}
	}
	return false
}

// grpcPrincipal authenticates a gRPC call.
func (g *authGuard) grpcPrincipal(ctx context.Context) (string, error) {
	var bearer string
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get("authorization"); len(v) > 0 {
			bearer = v[0]
		}
	}
	var tlsInfo *credentials.TLSInfo
	if p, ok := peer.FromContext(ctx); ok {
		if info, ok := p.AuthInfo.(credentials.TLSInfo); ok {
			tlsInfo = &info
		}
	}
	return g.authenticate(bearer, tlsInfo)
}

// serverOptions are the interceptors that authenticate and authorize the
// public gRPC services.
func (g *authGuard) serverOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(g.unary), grpc.ChainStreamInterceptor(g.stream)}
}

func (g *authGuard) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if !publicService(info.FullMethod) {
		return handler(ctx, req)
	}
	principal, err := g.grpcPrincipal(ctx)
	if err != nil {
		return nil, err
	}
	if err := g.authorizeUnary(principal, info.FullMethod, req); err != nil {
		return nil, err
	}
	if principal != "" {
		ctx = auth.WithPrincipal(ctx, principal)
	}
	resp, err := handler(ctx, req)
	if err == nil {
		g.auditUnary(ctx, req, resp)
	}
	return resp, err
}

// auditUnary logs the admin calls the public services serve (the Auth
// service logs its own): topic changes.
func (g *authGuard) auditUnary(ctx context.Context, req, resp any) {
	if r, ok := req.(*orderlogpb.CreateTopicRequest); ok {
		topic, _ := resp.(*orderlogpb.Topic)
		g.auditTopicCreated(ctx, r, topic)
	}
}

func (g *authGuard) auditTopicCreated(ctx context.Context, req *orderlogpb.CreateTopicRequest, topic *orderlogpb.Topic) {
	auth.Audit(ctx, g.logger, "topic created", "topic", topic.GetName(), "partitions", topic.GetPartitions(),
		"cleanup_policy", req.GetConfig().GetCleanupPolicy(), "retention_ms", req.GetConfig().GetRetentionMs())
}

// authorizeUnary checks a unary call's ACL; calls it does not name need
// only an authenticated principal (status, listings, InitProducer, whose
// session is then bound to the principal, descriptions of groups).
func (g *authGuard) authorizeUnary(principal, method string, req any) error {
	switch r := req.(type) {
	case *orderlogpb.CreateTopicRequest:
		return g.allow(principal, auth.Admin, r.Name)
	case *orderlogpb.ListPartitionsRequest:
		return g.allow(principal, auth.Read, cmp.Or(r.Topic, httpapi.DefaultTopic))
	case *orderlogpb.GroupCommit:
		return g.allow(principal, auth.Read, commitTopics(r)...)
	}
	switch {
	case strings.HasPrefix(method, "/orderlog.v1.Auth/"):
		return g.allow(principal, auth.Admin, "*")
	case strings.HasPrefix(method, "/arrow.flight.protocol.FlightService/"): // info and schemas name every topic's data
		return g.allowEverywhere(principal, auth.Read)
	}
	return nil
}

func commitTopics(c *orderlogpb.GroupCommit) []string {
	topics := make([]string, len(c.Offsets))
	for i, o := range c.Offsets {
		topics[i] = cmp.Or(o.Topic, httpapi.DefaultTopic)
	}
	return topics
}

func (g *authGuard) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if !publicService(info.FullMethod) {
		return handler(srv, ss)
	}
	principal, err := g.grpcPrincipal(ss.Context())
	if err != nil {
		return err
	}
	switch info.FullMethod {
	case "/orderlog.v1.Reader/Read", "/orderlog.v1.Reader/Tail":
		err = g.allowEverywhere(principal, auth.Read)
	case "/orderlog.v1.Reader/Query", "/orderlog.v1.Consumer/Consume":
		// checked on the first request (guardedStream)
	default:
		if strings.HasPrefix(info.FullMethod, "/arrow.flight.protocol.FlightService/") {
			err = g.allowEverywhere(principal, auth.Read)
		}
	}
	if err != nil {
		return err
	}
	ctx := ss.Context()
	if principal != "" {
		ctx = auth.WithPrincipal(ctx, principal)
		if info.FullMethod != "/orderlog.v1.Producer/Produce" {
			if err := g.chargeRead(ctx, principal, 0, true); err != nil {
				return err
			}
		}
	}
	release, err := g.holdings.openStream(principal) // limits.go
	if err != nil {
		return err
	}
	defer release()
	return handler(srv, &guardedStream{ServerStream: ss, ctx: ctx, guard: g, principal: principal})
}

// guardedStream carries the principal in its context and checks the first
// request of the streams whose ACL depends on it.
type guardedStream struct {
	grpc.ServerStream
	ctx       context.Context
	guard     *authGuard
	principal string
	checked   bool
}

func (s *guardedStream) Context() context.Context { return s.ctx }

// SendMsg charges what the stream sends to its principal's read quota
// (produce answers are small and not charged).
func (s *guardedStream) SendMsg(m any) error {
	if err := s.ServerStream.SendMsg(m); err != nil || s.principal == "" {
		return err
	}
	msg, ok := m.(proto.Message)
	if !ok {
		return nil
	}
	if _, isAnswer := m.(*orderlogpb.ProduceResponse); isAnswer {
		return nil
	}
	return s.guard.chargeRead(s.ctx, s.principal, proto.Size(msg), false)
}

func (s *guardedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if s.checked {
		return nil
	}
	s.checked = true
	switch r := m.(type) {
	case *orderlogpb.QueryRequest:
		if r.Topic == "" && r.Partition == nil {
			return s.guard.allowEverywhere(s.principal, auth.Read)
		}
		return s.guard.allow(s.principal, auth.Read, cmp.Or(r.Topic, httpapi.DefaultTopic))
	case *orderlogpb.ConsumeRequest:
		if j := r.GetJoin(); j != nil {
			topics := make([]string, len(j.Topics))
			for i, t := range j.Topics {
				topics[i] = cmp.Or(t, httpapi.DefaultTopic)
			}
			if len(topics) == 0 {
				topics = []string{httpapi.DefaultTopic}
			}
			return s.guard.allow(s.principal, auth.Read, topics...)
		}
	}
	return nil
}
