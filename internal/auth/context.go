package auth

import "context"

type principalKey struct{}

// WithPrincipal returns ctx carrying the authenticated principal of a call.
func WithPrincipal(ctx context.Context, principal string) context.Context {
	return context.WithValue(ctx, principalKey{}, principal)
}

// PrincipalFrom is the principal WithPrincipal put in ctx ("" and false:
// the call was not authenticated, because authentication is off).
func PrincipalFrom(ctx context.Context) (string, bool) {
	p, ok := ctx.Value(principalKey{}).(string)
	return p, ok
}
