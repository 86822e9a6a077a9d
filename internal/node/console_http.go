package node

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"orderlog/console"
	"orderlog/ingest"
	"orderlog/internal/apierr"
	"orderlog/internal/auth"
	"orderlog/schema"
	"orderlog/tiering"
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
	mux.HandleFunc("GET /v1/console/groups", s.serveConsoleGroups)
	mux.HandleFunc("GET /v1/console/producers", s.serveConsoleProducers)
	mux.HandleFunc("GET /v1/console/archive", s.serveConsoleArchive)
}

// consoleSession is who the console is talking as.
type consoleSession struct {
	Principal   string   `json:"principal,omitempty"` // "" with authentication off
	AuthEnabled bool     `json:"auth_enabled"`
	Roles       []string `json:"roles"` // the roles this process runs
	// IngestEndpoints, on a node without the ingest role (which serves no
	// /v1/status, /v1/messages or /v1/topics), are the gRPC addresses of
	// the nodes that have it, as far as etcd knows them.
	IngestEndpoints []string `json:"ingest_endpoints,omitempty"`
}

// serveConsoleSession answers GET /v1/console/session.
func (s *Server) serveConsoleSession(w http.ResponseWriter, r *http.Request) {
	principal, err := s.auth.callPrincipal(r.Context())
	if err != nil {
		apierr.WriteHTTP(w, err)
		return
	}
	session := consoleSession{Principal: principal, AuthEnabled: s.auth.enabled(), Roles: s.consoleRoles()}
	if s.ingest == nil {
		session.IngestEndpoints, _ = clientEndpoints(r.Context(), s.cli) // none known if etcd does not answer
	}
	writeConsoleJSON(w, session)
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

// mayReadAll reports whether principal may read every one of topics; a
// list of no topics needs read on every topic ("" with authentication off
// may read everything).
func (s *Server) mayReadAll(principal string, topics []string) bool {
	if principal == "" {
		return true
	}
	rules := s.auth.watcher.Current().Rules
	if len(topics) == 0 {
		return rules.AllowsEverywhere(principal, auth.Read)
	}
	for _, t := range topics {
		if !rules.Allows(principal, auth.Read, t) {
			return false
		}
	}
	return true
}

// consoleAdmin reports whether principal is an administrator (admin on
// every topic), or authentication is off.
func (s *Server) consoleAdmin(principal string) bool {
	return principal == "" || s.auth.watcher.Current().Rules.AllowsEverywhere(principal, auth.Admin)
}

// consoleGroup is one consumer group in the console's list.
type consoleGroup struct {
	Group      string   `json:"group"`
	Generation uint64   `json:"generation"`
	Members    int      `json:"members"`
	Topics     []string `json:"topics"`
	Partitions int      `json:"partitions"`
	TotalLag   uint64   `json:"total_lag"`
}

// Bounds of the console's group listing, in groups per page.
const (
	consoleGroupsDefault = 100
	consoleGroupsMax     = 500
)

// serveConsoleGroups answers GET /v1/console/groups?after=GROUP&limit=N:
// a page of consumer groups in key order, those whose topics the caller
// may all read, with their members and total lag; next_after, when
// present, asks for the rest, and undecodable counts the groups of the
// page whose keys in etcd do not decode. Groups have no ACL of their own:
// a group is shown to whoever may read what it consumes (one with no
// topic, to whoever may read every topic).
func (s *Server) serveConsoleGroups(w http.ResponseWriter, r *http.Request) {
	principal, err := s.auth.callPrincipal(r.Context())
	if err != nil {
		apierr.WriteHTTP(w, err)
		return
	}
	limit, err := consoleLimit(r.URL.Query(), consoleGroupsDefault, consoleGroupsMax)
	if err != nil {
		apierr.WriteHTTP(w, err)
		return
	}
	if s.consumers == nil {
		writeConsoleJSON(w, map[string]any{"groups": []consoleGroup{},
			"unavailable": "this node serves no consumer groups: it has no reader role"})
		return
	}
	page, err := s.consumers.ListGroups(r.Context(), r.URL.Query().Get("after"), limit)
	if err != nil {
		apierr.WriteHTTP(w, err)
		return
	}
	groups := []consoleGroup{}
	for _, g := range page.Groups {
		if !s.mayReadAll(principal, g.Topics) {
			continue
		}
		groups = append(groups, consoleGroup{Group: g.Group, Generation: g.Generation, Members: g.Members,
			Topics: append([]string{}, g.Topics...), Partitions: g.Partitions, TotalLag: g.TotalLag})
	}
	answer := map[string]any{"groups": groups}
	if page.Next != "" {
		answer["next_after"] = page.Next
	}
	if page.Undecodable > 0 {
		answer["undecodable"] = page.Undecodable
	}
	writeConsoleJSON(w, answer)
}

// Bounds of the console's producer listing: a page holds at most
// consoleProducersMax records, and reads at most consoleProducerScan
// records from etcd for a caller who sees only their own.
const (
	consoleProducersDefault = 100
	consoleProducersMax     = 500
	consoleProducerScan     = 1000
)

// consoleProducer is one producer record in the console's list.
type consoleProducer struct {
	ID           uint64 `json:"id"`
	Name         string `json:"name"`
	Epoch        uint64 `json:"epoch"`
	Owner        string `json:"owner"`
	OwnerAddress string `json:"owner_address,omitempty"`
	OwnerLive    bool   `json:"owner_live"` // false: the owner's liveness key is gone
	OwnedHere    bool   `json:"owned_here"`
	Principal    string `json:"principal,omitempty"`
	Expired      bool   `json:"expired,omitempty"`
	Bucket       bool   `json:"idempotency_bucket,omitempty"`
	// LastDurableSeq is known only for producers this node owns (from its
	// memory, not etcd); absent when none of their messages is durable yet.
	LastDurableSeq *uint64 `json:"last_durable_seq,omitempty"`
}

// serveConsoleProducers answers GET /v1/console/producers?after=ID&limit=N:
// producer records from etcd in id order, an administrator's all of them,
// anyone else's only those bound to them. next_after, when present, asks
// for the rest.
func (s *Server) serveConsoleProducers(w http.ResponseWriter, r *http.Request) {
	principal, err := s.auth.callPrincipal(r.Context())
	if err != nil {
		apierr.WriteHTTP(w, err)
		return
	}
	after, limit, err := consolePage(r.URL.Query(), "after", consoleProducersDefault, consoleProducersMax)
	if err != nil {
		apierr.WriteHTTP(w, err)
		return
	}
	admin := s.consoleAdmin(principal)
	scan, keep := limit, func(ingest.ProducerRecord) bool { return true }
	if !admin {
		scan, keep = consoleProducerScan, func(p ingest.ProducerRecord) bool { return p.Principal == principal }
	}
	records, next, err := ingest.ListProducers(r.Context(), s.cli, after, limit, scan, keep)
	if err != nil {
		apierr.WriteHTTP(w, apierr.New(apierr.Unavailable, "%v", err))
		return
	}
	producers := s.consoleProducers(records)
	answer := map[string]any{"producers": producers, "all_principals": admin}
	if next != 0 {
		answer["next_after"] = next
	}
	if s.ingest != nil {
		answer["node_incarnation"] = s.ingest.Incarnation()
	}
	writeConsoleJSON(w, answer)
}

// consoleProducers renders records, with the last durable seq of those
// this node owns.
func (s *Server) consoleProducers(records []ingest.ProducerRecord) []consoleProducer {
	var incarnation string
	var owned []uint64
	if s.ingest != nil {
		incarnation = s.ingest.Incarnation()
		for _, p := range records {
			if p.Owner == incarnation {
				owned = append(owned, p.ID)
			}
		}
	}
	var seqs map[uint64]uint64
	if len(owned) > 0 {
		seqs = s.ingest.LastDurableSeqs(owned)
	}
	out := make([]consoleProducer, 0, len(records))
	for _, p := range records {
		c := consoleProducer{ID: p.ID, Name: p.Name, Epoch: p.Epoch, Owner: p.Owner, OwnerAddress: p.OwnerAddress,
			OwnerLive: p.OwnerLive, OwnedHere: incarnation != "" && p.Owner == incarnation,
			Principal: p.Principal, Expired: p.Expired, Bucket: p.Bucket}
		if seq, ok := seqs[p.ID]; ok {
			c.LastDurableSeq = &seq
		}
		out = append(out, c)
	}
	return out
}

// consolePage reads a page's cursor (a number, 0 if absent) and limit
// (def if absent, at most most).
func consolePage(q url.Values, cursorName string, def, most int) (cursor uint64, limit int, err error) {
	if v := q.Get(cursorName); v != "" {
		if cursor, err = strconv.ParseUint(v, 10, 64); err != nil {
			return 0, 0, apierr.New(apierr.InvalidArgument, "%s=%q is not an offset or id", cursorName, v)
		}
	}
	limit, err = consoleLimit(q, def, most)
	return cursor, limit, err
}

// consoleLimit reads a page's limit: def if absent, at most most.
func consoleLimit(q url.Values, def, most int) (int, error) {
	v := q.Get("limit")
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, apierr.New(apierr.InvalidArgument, "limit=%q is not a positive number", v)
	}
	if n > most {
		return 0, apierr.New(apierr.LimitTooLarge, "limit %d exceeds %d", n, most)
	}
	return n, nil
}

// Bounds of the console's archive listing, in files per page.
const (
	consoleArchiveDefault = 50
	consoleArchiveMax     = 500
)

// consoleArchiveFile is one archive file as the console lists it.
type consoleArchiveFile struct {
	Object          string         `json:"object"`
	First           uint64         `json:"first"`
	End             uint64         `json:"end"`
	Rows            int64          `json:"rows"`
	Bytes           int64          `json:"bytes"`
	Holes           []tiering.Hole `json:"holes"`
	FirstIngestTime string         `json:"first_ingest_time,omitempty"`
	LastIngestTime  string         `json:"last_ingest_time,omitempty"`
}

// serveConsoleArchive answers GET /v1/console/archive?before=OFFSET&limit=N:
// the archive's head (T, totals) and its files newest first, as this
// node's archive reader has loaded them; next_before, when present, asks
// for older files. Archive files hold every topic's messages, so only a
// principal who may read every topic (or an administrator) gets it. On a
// node without an archive, "enabled" is false and "reason" says why.
func (s *Server) serveConsoleArchive(w http.ResponseWriter, r *http.Request) {
	principal, err := s.auth.callPrincipal(r.Context())
	if err != nil {
		apierr.WriteHTTP(w, err)
		return
	}
	if err := s.auth.allowEverywhere(principal, auth.Read); err != nil {
		apierr.WriteHTTP(w, err)
		return
	}
	before, limit, err := consolePage(r.URL.Query(), "before", consoleArchiveDefault, consoleArchiveMax)
	if err != nil {
		apierr.WriteHTTP(w, err)
		return
	}
	if s.archive == nil {
		reason := "this node runs without an archive (--archive none): nothing is archived, and reads below the log start answer OFFSET_OUT_OF_RANGE"
		if s.cfg.Archive.URL != "" {
			reason = "this node has no reader role: the archive is followed by the nodes that serve reads"
		}
		writeConsoleJSON(w, map[string]any{"enabled": false, "reason": reason})
		return
	}
	l := s.archive.Listing(before, limit)
	files := make([]consoleArchiveFile, 0, len(l.Files))
	for _, f := range l.Files {
		files = append(files, consoleArchiveFile{Object: f.Object, First: f.First, End: f.End, Rows: f.Rows, Bytes: f.Bytes,
			Holes: append([]tiering.Hole{}, f.Holes...), FirstIngestTime: consoleMicros(f.FirstIngestMicros), LastIngestTime: consoleMicros(f.LastIngestMicros)})
	}
	answer := map[string]any{"enabled": true, "location": s.cfg.Archive.URL, "known": l.Known, "first": l.Head.First, "t": l.Head.T,
		"loaded": l.Loaded, "files_total": l.Head.Files, "rows_total": l.Head.Rows, "bytes_total": l.Head.Bytes, "files": files}
	if l.Before != 0 {
		answer["next_before"] = l.Before
	}
	writeConsoleJSON(w, answer)
}

// consoleMicros renders microseconds since the epoch as RFC 3339 ("" for 0).
func consoleMicros(us int64) string {
	if us == 0 {
		return ""
	}
	return time.UnixMicro(us).UTC().Format(time.RFC3339Nano)
}
