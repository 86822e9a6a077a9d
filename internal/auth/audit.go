package auth

import (
	"context"
	"log/slog"
)

// Audit logs an administrative action (a token, ACL, quota or topic
// change, a producer fenced) as an "audit" line with the principal of the
// call in ctx, so that every node's log answers "who did this". A call
// made while authentication was off says so instead of a principal.
func Audit(ctx context.Context, logger *slog.Logger, action string, attrs ...any) {
	principal, _ := PrincipalFrom(ctx)
	if principal == "" {
		principal = "(authentication off)"
	}
	logger.Info("audit", append([]any{"principal", principal, "action", action}, attrs...)...)
}
