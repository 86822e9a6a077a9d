package node

import (
	"cmp"
	"context"
	"net/http"
	"strings"

	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/proto"

	"orderlog/ingest/httpapi"
	"orderlog/internal/apierr"
	"orderlog/internal/auth"
	"orderlog/proto/orderlogpb"
)

// httpHandler authenticates the /v1 API; /healthz, /readyz and /metrics
// stay open (they carry no messages). It only finds the principal: what a
// call may do is checked where the call is served (httpService and
// guardedConsumers below, the ingest node for produce frames), not by
// parsing paths, which a %2F or a HEAD would get past.
func (g *authGuard) httpHandler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, "/v1/") {
			next.ServeHTTP(w, r)
			return
		}
		var tlsInfo *credentials.TLSInfo
		if r.TLS != nil {
			tlsInfo = &credentials.TLSInfo{State: *r.TLS}
		}
		principal, err := g.authenticate(r.Header.Get("Authorization"), tlsInfo)
		if err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="orderlog"`)
			apierr.WriteHTTP(w, err)
			return
		}
		if principal != "" {
			r = r.WithContext(auth.WithPrincipal(r.Context(), principal))
		}
		next.ServeHTTP(w, r)
	})
}

// callPrincipal is the principal the front end put in ctx; "" when
// authentication is off. A call that reached here unauthenticated while
// it is on is refused.
func (g *authGuard) callPrincipal(ctx context.Context) (string, error) {
	if p, ok := auth.PrincipalFrom(ctx); ok {
		return p, nil
	}
	if g.enabled() {
		return "", errUnauthenticated
	}
	return "", nil
}

// authorize refuses the caller's op on any of topics without the ACL.
func (g *authGuard) authorize(ctx context.Context, op auth.Operation, topics ...string) error {
	principal, err := g.callPrincipal(ctx)
	if err != nil {
		return err
	}
	return g.allow(principal, op, topics...)
}

// authorizeQuery checks a query: read on its topic, or on every topic
// when it names none.
func (g *authGuard) authorizeQuery(ctx context.Context, req *orderlogpb.QueryRequest) error {
	principal, err := g.callPrincipal(ctx)
	if err != nil {
		return err
	}
	if req.Topic == "" && req.Partition == nil {
		return g.allowEverywhere(principal, auth.Read)
	}
	return g.allow(principal, auth.Read, cmp.Or(req.Topic, httpapi.DefaultTopic))
}

// Query (HTTP GET /v1/messages) checks the read ACL and charges the page
// to the read quota.
func (h httpService) Query(ctx context.Context, req *orderlogpb.QueryRequest) (*orderlogpb.ReadResponse, error) {
	if err := h.guard.authorizeQuery(ctx, req); err != nil {
		return nil, err
	}
	if err := h.guard.chargeReadCall(ctx, 0, true); err != nil {
		return nil, err
	}
	resp, err := h.service.Query(ctx, req)
	if err == nil {
		_ = h.guard.chargeReadCall(ctx, proto.Size(resp), false)
	}
	return resp, err
}

func (h httpService) CreateTopic(ctx context.Context, req *orderlogpb.CreateTopicRequest) (*orderlogpb.Topic, error) {
	if err := h.guard.authorize(ctx, auth.Admin, req.Name); err != nil {
		return nil, err
	}
	topic, err := h.service.CreateTopic(ctx, req)
	if err == nil {
		h.guard.auditTopicCreated(ctx, req, topic)
	}
	return topic, err
}

func (h httpService) ListPartitions(ctx context.Context, req *orderlogpb.ListPartitionsRequest) (*orderlogpb.ListPartitionsResponse, error) {
	if err := h.guard.authorize(ctx, auth.Read, cmp.Or(req.Topic, httpapi.DefaultTopic)); err != nil {
		return nil, err
	}
	return h.service.ListPartitions(ctx, req)
}

// guardedConsumers checks the HTTP consumer-group calls: joining needs
// read on every topic joined, a commit read on every topic it names, and
// the stream's batches count against the read quota.
type guardedConsumers struct {
	httpapi.Consumers
	guard *authGuard
}

func (c guardedConsumers) Serve(ctx context.Context, join *orderlogpb.JoinGroup, recv func() (*orderlogpb.ConsumeRequest, error),
	send func(*orderlogpb.ConsumeResponse) error) error {
	topics := make([]string, 0, len(join.GetTopics())+1)
	for _, t := range join.GetTopics() {
		topics = append(topics, cmp.Or(t, httpapi.DefaultTopic))
	}
	if len(topics) == 0 {
		topics = append(topics, httpapi.DefaultTopic)
	}
	if err := c.guard.authorize(ctx, auth.Read, topics...); err != nil {
		return err
	}
	if err := c.guard.chargeReadCall(ctx, 0, true); err != nil {
		return err
	}
	principal, _ := auth.PrincipalFrom(ctx)
	release, err := c.guard.holdings.openStream(principal) // an HTTP stream counts as a gRPC one does
	if err != nil {
		return err
	}
	defer release()
	return c.Consumers.Serve(ctx, join, recv, func(resp *orderlogpb.ConsumeResponse) error {
		if err := send(resp); err != nil {
			return err
		}
		return c.guard.chargeReadCall(ctx, proto.Size(resp), false)
	})
}

func (c guardedConsumers) CommitOffsets(ctx context.Context, commit *orderlogpb.GroupCommit) (*orderlogpb.CommitOffsetsResponse, error) {
	if err := c.guard.authorize(ctx, auth.Read, commitTopics(commit)...); err != nil {
		return nil, err
	}
	return c.Consumers.CommitOffsets(ctx, commit)
}

// groupAccess decides who may see a consumer group's description: whoever
// may read every topic it names, as the console's group list decides (a
// group has no ACL of its own; one naming no topic, whoever may read all).
func (g *authGuard) groupAccess(ctx context.Context, topics []string) error {
	principal, err := g.callPrincipal(ctx)
	if err != nil {
		return err
	}
	if len(topics) == 0 {
		return g.allowEverywhere(principal, auth.Read)
	}
	return g.allow(principal, auth.Read, topics...)
}
