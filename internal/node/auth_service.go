package node

import (
	"context"
	"log/slog"

	"orderlog/internal/apierr"
	"orderlog/internal/auth"
	"orderlog/proto/orderlogpb"
)

// authService manages tokens and ACLs (the Auth gRPC service). The guard's
// interceptor lets only admins of "*" call it once authentication is on.
// Every change is logged with the principal that made it (the audit
// trail).
type authService struct {
	orderlogpb.UnimplementedAuthServer
	store  *auth.Store
	logger *slog.Logger
}

// audit logs an administrative action with the caller's principal.
func audit(ctx context.Context, logger *slog.Logger, action string, attrs ...any) {
	auth.Audit(ctx, logger, action, attrs...)
}

func (s *authService) CreateToken(ctx context.Context, req *orderlogpb.CreateTokenRequest) (*orderlogpb.CreateTokenResponse, error) {
	rec, secret, err := s.store.CreateToken(ctx, req.Principal, req.Description, req.Admin)
	if err != nil {
		return nil, apierr.New(apierr.InvalidArgument, "%v", err)
	}
	audit(ctx, s.logger, "token created", "token_id", rec.ID, "for", rec.Principal, "admin", req.Admin)
	return &orderlogpb.CreateTokenResponse{Token: tokenInfo(rec), Secret: secret}, nil
}

func (s *authService) RevokeToken(ctx context.Context, req *orderlogpb.RevokeTokenRequest) (*orderlogpb.RevokeTokenResponse, error) {
	ok, err := s.store.RevokeToken(ctx, req.Id)
	if err != nil {
		return nil, apierr.New(apierr.Unavailable, "revoke token: %v", err)
	}
	audit(ctx, s.logger, "token revoked", "token_id", req.Id, "existed", ok)
	return &orderlogpb.RevokeTokenResponse{Revoked: ok}, nil
}

func (s *authService) ListTokens(ctx context.Context, _ *orderlogpb.ListTokensRequest) (*orderlogpb.ListTokensResponse, error) {
	st, err := s.store.Load(ctx)
	if err != nil {
		return nil, apierr.New(apierr.Unavailable, "list tokens: %v", err)
	}
	resp := &orderlogpb.ListTokensResponse{}
	for _, rec := range st.Tokens {
		resp.Tokens = append(resp.Tokens, tokenInfo(rec))
	}
	return resp, nil
}

func tokenInfo(rec auth.TokenRecord) *orderlogpb.TokenInfo {
	return &orderlogpb.TokenInfo{Id: rec.ID, Principal: rec.Principal, Description: rec.Description, CreatedUs: rec.CreatedUS}
}

func aclOf(e *orderlogpb.AclEntry) (auth.ACL, error) {
	op, err := auth.ParseOperation(e.Operation)
	if err != nil {
		return auth.ACL{}, apierr.New(apierr.InvalidArgument, "%v", err)
	}
	a := auth.ACL{Principal: e.Principal, Topic: e.Topic, Operation: op}
	if err := a.Validate(); err != nil {
		return auth.ACL{}, apierr.New(apierr.InvalidArgument, "%v", err)
	}
	return a, nil
}

func (s *authService) AddAcl(ctx context.Context, e *orderlogpb.AclEntry) (*orderlogpb.AddAclResponse, error) {
	a, err := aclOf(e)
	if err != nil {
		return nil, err
	}
	if err := s.store.AddACL(ctx, a); err != nil {
		return nil, apierr.New(apierr.Unavailable, "add ACL: %v", err)
	}
	audit(ctx, s.logger, "ACL added", "for", a.Principal, "topic", a.Topic, "operation", a.Operation)
	return &orderlogpb.AddAclResponse{}, nil
}

func (s *authService) RemoveAcl(ctx context.Context, e *orderlogpb.AclEntry) (*orderlogpb.RemoveAclResponse, error) {
	a, err := aclOf(e)
	if err != nil {
		return nil, err
	}
	ok, err := s.store.RemoveACL(ctx, a)
	if err != nil {
		return nil, apierr.New(apierr.Unavailable, "remove ACL: %v", err)
	}
	audit(ctx, s.logger, "ACL removed", "for", a.Principal, "topic", a.Topic, "operation", a.Operation, "existed", ok)
	return &orderlogpb.RemoveAclResponse{Removed: ok}, nil
}

func (s *authService) ListAcls(ctx context.Context, _ *orderlogpb.ListAclsRequest) (*orderlogpb.ListAclsResponse, error) {
	st, err := s.store.Load(ctx)
	if err != nil {
		return nil, apierr.New(apierr.Unavailable, "list ACLs: %v", err)
	}
	resp := &orderlogpb.ListAclsResponse{}
	for _, a := range st.Rules.Entries() {
		resp.Entries = append(resp.Entries, &orderlogpb.AclEntry{Principal: a.Principal, Topic: a.Topic, Operation: string(a.Operation)})
	}
	return resp, nil
}

func (s *authService) SetQuota(ctx context.Context, q *orderlogpb.Quota) (*orderlogpb.SetQuotaResponse, error) {
	quota := auth.Quota{ProduceBytesPerSec: q.ProduceBytesPerSec, ReadBytesPerSec: q.ReadBytesPerSec}
	if err := s.store.SetQuota(ctx, q.Principal, quota); err != nil {
		return nil, apierr.New(apierr.InvalidArgument, "%v", err)
	}
	audit(ctx, s.logger, "quota set", "for", q.Principal, "produce_bytes_per_sec", q.ProduceBytesPerSec,
		"read_bytes_per_sec", q.ReadBytesPerSec)
	return &orderlogpb.SetQuotaResponse{}, nil
}

func (s *authService) ListQuotas(ctx context.Context, _ *orderlogpb.ListQuotasRequest) (*orderlogpb.ListQuotasResponse, error) {
	st, err := s.store.Load(ctx)
	if err != nil {
		return nil, apierr.New(apierr.Unavailable, "list quotas: %v", err)
	}
	resp := &orderlogpb.ListQuotasResponse{}
	for principal, q := range st.Quotas {
		resp.Quotas = append(resp.Quotas, &orderlogpb.Quota{Principal: principal, ProduceBytesPerSec: q.ProduceBytesPerSec, ReadBytesPerSec: q.ReadBytesPerSec})
	}
	return resp, nil
}
