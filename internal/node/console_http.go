package node

import (
	"context"
	"encoding/json"
	"net/http"

	"orderlog/console"
	"orderlog/ingest"
	"orderlog/internal/apierr"
	"orderlog/internal/auth"
	"orderlog/schema"
)

// mountConsole serves the web console (package console, docs/console.md)
// at /ui/ on every role, and the read-only JSON it needs that the /v1 API
// has no route for. The console's own files carry no data and need no
// credentials; /v1/console/ is authenticated by the auth front end like
// the rest of /v1/, and each answer holds only what the caller may read.
func (s *Server) mountConsole(mux *http.ServeMux) {
	mux.Handle("GET "+console.Prefix, console.Handler())
	mux.Handle("GET /ui", http.RedirectHandler(console.Prefix, http.StatusMovedPermanently))
	mux.HandleFunc("GET /v1/console/session", s.serveConsoleSession)
	mux.HandleFunc("GET /v1/console/topics", s.serveConsoleTopics)
}

// consoleSession is who the console is talking as.
type consoleSession struct {
	Principal   string   `json:"principal,omitempty"` // "" with authentication off
	AuthEnabled bool     `json:"auth_enabled"`
	Roles       []string `json:"roles"` // the roles this process runs
}

// serveConsoleSession answers GET /v1/console/session.
func (s *Server) serveConsoleSession(w http.ResponseWriter, r *http.Request) {
	principal, err := s.auth.callPrincipal(r.Context())
	if err != nil {
		apierr.WriteHTTP(w, err)
		return
	}
	writeConsoleJSON(w, consoleSession{Principal: principal, AuthEnabled: s.auth.enabled(), Roles: s.consoleRoles()})
}

func (s *Server) consoleRoles() []string {
	roles := []string{}
	for _, role := range []struct {
		name string
		runs bool
	}{{"store", s.store != nil}, {"sequencer", s.sequencer != nil}, {"ingest", s.ingest != nil},
		{"reader", s.reader != nil}, {"consumers", s.consumers != nil}} {
		if role.runs {
			roles = append(roles, role.name)
		}
	}
	return roles
}

// consoleTopic is a topic as the console's Topics page shows it: its
// configuration and the latest schema of the subject named like it.
type consoleTopic struct {
	Name              string `json:"name"`
	Partitions        uint32 `json:"partitions"`
	CleanupPolicy     string `json:"cleanup_policy"`
	RetentionMs       int64  `json:"retention_ms"`
	DeleteRetentionMs int64  `json:"delete_retention_ms"`
	RetentionBytes    int64  `json:"retention_bytes"`
	SchemaFormat      string `json:"schema_format,omitempty"`
	SchemaVersion     int    `json:"schema_version,omitempty"`
	SchemaID          int64  `json:"schema_id,omitempty"`
}

// serveConsoleTopics answers GET /v1/console/topics: the topics the
// caller may read, with their configuration. Topics it may not read are
// left out, not refused: the list is what the caller may see.
func (s *Server) serveConsoleTopics(w http.ResponseWriter, r *http.Request) {
	principal, err := s.auth.callPrincipal(r.Context())
	if err != nil {
		apierr.WriteHTTP(w, err)
		return
	}
	all, err := ingest.ListTopics(r.Context(), s.cli)
	if err != nil {
		apierr.WriteHTTP(w, err)
		return
	}
	subjects := s.schemaSubjects(r.Context())
	topics := []consoleTopic{}
	for _, t := range all {
		if principal != "" && !s.auth.watcher.Current().Rules.Allows(principal, auth.Read, t.Name) {
			continue
		}
		c := t.GetConfig()
		topic := consoleTopic{Name: t.Name, Partitions: t.Partitions, CleanupPolicy: c.GetCleanupPolicy(),
			RetentionMs: c.GetRetentionMs(), DeleteRetentionMs: c.GetDeleteRetentionMs(), RetentionBytes: c.GetRetentionBytes()}
		if subjects[t.Name] {
			s.addLatestSchema(r.Context(), &topic)
		}
		topics = append(topics, topic)
	}
	writeConsoleJSON(w, map[string]any{"topics": topics})
}

// schemaSubjects is the registry's subjects as a set; empty if etcd does
// not answer (the topics list without schemas then).
func (s *Server) schemaSubjects(ctx context.Context) map[string]bool {
	set := map[string]bool{}
	names, err := schema.New(s.cli).Subjects(ctx)
	if err != nil {
		return set
	}
	for _, name := range names {
		set[name] = true
	}
	return set
}

func (s *Server) addLatestSchema(ctx context.Context, topic *consoleTopic) {
	v, err := schema.New(s.cli).Get(ctx, topic.Name, schema.Latest)
	if err != nil {
		return
	}
	topic.SchemaFormat, topic.SchemaVersion, topic.SchemaID = string(v.Format), v.Version, v.ID
}

func writeConsoleJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(v)
}
