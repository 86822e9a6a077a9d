package node

import (
	"context"
	"net/http"

	"orderlog/internal/auth"
	"orderlog/schema"
)

// mountSchemas serves the schema registry (Confluent's REST API, see
// docs/schemas.md) at /v1/schemas/ on every role: it needs only etcd. The
// auth front end authenticates it like the rest of /v1/, and schemaAccess
// authorizes each call once schema.Handler has parsed its subject.
func (s *Server) mountSchemas(mux *http.ServeMux) {
	mux.Handle("/v1/schemas/", http.StripPrefix("/v1/schemas", schema.Handler(schema.New(s.cli), s.auth.schemaAccess)))
}

// startSchemaChecks follows the registry's validation modes for the
// ingest role's produce path (ingest/schemas.go).
func (s *Server) startSchemaChecks(ctx context.Context) error {
	checker, err := schema.NewChecker(ctx, s.cli, s.logger)
	if err != nil {
		return err
	}
	s.schemaChecker, s.cfg.Ingest.Schemas = checker, checker
	return nil
}

// schemaAccess is the registry's authorization. Subjects are named like
// topics: writing (registering a version, setting a level) needs admin on
// the subject's topic, reading needs read; subject "" (the global level, a
// schema by id) needs the operation on every topic.
func (g *authGuard) schemaAccess(ctx context.Context, access schema.Access, subject string) error {
	principal, err := g.callPrincipal(ctx)
	if err != nil {
		return err
	}
	op := auth.Read
	if access == schema.WriteAccess {
		op = auth.Admin
	}
	if subject == "" {
		return g.allowEverywhere(principal, op)
	}
	return g.allow(principal, op, subject)
}
