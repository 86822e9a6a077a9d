package client

import (
	"context"

	"google.golang.org/grpc"

	"orderlog/internal/apierr"
	"orderlog/proto/orderlogpb"
)

// Auth is the Auth service (tokens, ACLs, quotas) at the first endpoint
// that answers; its calls need admin on "*" once authentication is on.
func (c *Client) Auth() AuthAdmin { return AuthAdmin{c} }

// AuthAdmin manages credentials (docs/security.md).
type AuthAdmin struct{ c *Client }

func authCall[T any](ctx context.Context, c *Client, call func(ctx context.Context, ac orderlogpb.AuthClient) (T, error)) (T, error) {
	return serviceCall(ctx, c, orderlogpb.NewAuthClient, call)
}

// serviceCall makes one unary call of a service S at the first endpoint
// that answers (Client.unary), its error as an *apierr.Error.
func serviceCall[S, T any](ctx context.Context, c *Client, newClient func(grpc.ClientConnInterface) S,
	call func(ctx context.Context, service S) (T, error)) (T, error) {
	var out T
	err := c.unary(ctx, func(ctx context.Context, conn *grpc.ClientConn) error {
		var err error
		out, err = call(ctx, newClient(conn))
		return err
	})
	if err != nil {
		return out, apierr.FromGRPC(err)
	}
	return out, nil
}

// CreateToken makes a token for principal (with admin, also admin on
// every topic) and returns it with the secret, shown this once.
func (a AuthAdmin) CreateToken(ctx context.Context, principal, description string, admin bool) (*orderlogpb.CreateTokenResponse, error) {
	return authCall(ctx, a.c, func(ctx context.Context, ac orderlogpb.AuthClient) (*orderlogpb.CreateTokenResponse, error) {
		return ac.CreateToken(ctx, &orderlogpb.CreateTokenRequest{Principal: principal, Description: description, Admin: admin})
	})
}

// RevokeToken deletes a token by id; false if there was none.
func (a AuthAdmin) RevokeToken(ctx context.Context, id string) (bool, error) {
	resp, err := authCall(ctx, a.c, func(ctx context.Context, ac orderlogpb.AuthClient) (*orderlogpb.RevokeTokenResponse, error) {
		return ac.RevokeToken(ctx, &orderlogpb.RevokeTokenRequest{Id: id})
	})
	return resp.GetRevoked(), err
}

// ListTokens lists the tokens (never their secrets).
func (a AuthAdmin) ListTokens(ctx context.Context) ([]*orderlogpb.TokenInfo, error) {
	resp, err := authCall(ctx, a.c, func(ctx context.Context, ac orderlogpb.AuthClient) (*orderlogpb.ListTokensResponse, error) {
		return ac.ListTokens(ctx, &orderlogpb.ListTokensRequest{})
	})
	return resp.GetTokens(), err
}

// AddACL lets principal do operation on the topics topic matches.
func (a AuthAdmin) AddACL(ctx context.Context, e *orderlogpb.AclEntry) error {
	_, err := authCall(ctx, a.c, func(ctx context.Context, ac orderlogpb.AuthClient) (*orderlogpb.AddAclResponse, error) {
		return ac.AddAcl(ctx, e)
	})
	return err
}

// RemoveACL removes an entry; false if there was none.
func (a AuthAdmin) RemoveACL(ctx context.Context, e *orderlogpb.AclEntry) (bool, error) {
	resp, err := authCall(ctx, a.c, func(ctx context.Context, ac orderlogpb.AuthClient) (*orderlogpb.RemoveAclResponse, error) {
		return ac.RemoveAcl(ctx, e)
	})
	return resp.GetRemoved(), err
}

// ListACLs lists every entry.
func (a AuthAdmin) ListACLs(ctx context.Context) ([]*orderlogpb.AclEntry, error) {
	resp, err := authCall(ctx, a.c, func(ctx context.Context, ac orderlogpb.AuthClient) (*orderlogpb.ListAclsResponse, error) {
		return ac.ListAcls(ctx, &orderlogpb.ListAclsRequest{})
	})
	return resp.GetEntries(), err
}

// SetQuota sets a principal's quota (zero rates remove it).
func (a AuthAdmin) SetQuota(ctx context.Context, q *orderlogpb.Quota) error {
	_, err := authCall(ctx, a.c, func(ctx context.Context, ac orderlogpb.AuthClient) (*orderlogpb.SetQuotaResponse, error) {
		return ac.SetQuota(ctx, q)
	})
	return err
}

// ListQuotas lists every quota.
func (a AuthAdmin) ListQuotas(ctx context.Context) ([]*orderlogpb.Quota, error) {
	resp, err := authCall(ctx, a.c, func(ctx context.Context, ac orderlogpb.AuthClient) (*orderlogpb.ListQuotasResponse, error) {
		return ac.ListQuotas(ctx, &orderlogpb.ListQuotasRequest{})
	})
	return resp.GetQuotas(), err
}
