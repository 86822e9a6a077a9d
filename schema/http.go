package schema

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"

	"orderlog/internal/apierr"
)

// ContentType is the media type of the Confluent Schema Registry API.
const ContentType = "application/vnd.schemaregistry.v1+json"

// MaxRequestBytes bounds a request body (a schema lives in one etcd value).
const MaxRequestBytes = 1 << 20

// Confluent's error codes, sent as error_code in error bodies.
const (
	codeUnauthorized        = 40101
	codeForbidden           = 40301
	codeSubjectNotFound     = 40401
	codeVersionNotFound     = 40402
	codeSchemaNotFound      = 40403
	codeSubjectLevelNotSet  = 40408
	codeIncompatible        = 409
	codeInvalidSchema       = 42201
	codeInvalidVersion      = 42202
	codeInvalidLevel        = 42203
	codeBackendStore        = 50001
	codeBackendStoreTimeout = 50002
)

// Access is what a call does to a subject.
type Access int

const (
	// ReadAccess: reading versions, ids, levels; lookups and compatibility checks.
	ReadAccess Access = iota
	// WriteAccess: registering a version, setting a level.
	WriteAccess
)

// Authorize decides a call before it is served: the access it needs, on
// subject, or with subject "" on every subject (the global level, a
// schema by id). A nil error allows; an apierr error (PERMISSION_DENIED,
// UNAUTHENTICATED) is answered as Confluent does (403 40301, 401 40101).
// GET /subjects lists only the subjects read is allowed on.
type Authorize func(ctx context.Context, access Access, subject string) error

// AllowAll is the Authorize of a registry without authorization.
func AllowAll(context.Context, Access, string) error { return nil }

// httpError is a Confluent error answer: HTTP status and body.
type httpError struct {
	status  int
	code    int
	message string
}

func (e *httpError) Error() string { return e.message }

// confluentCodes maps API codes to Confluent's status and error_code.
var confluentCodes = map[apierr.Code][2]int{
	apierr.InvalidSchema:        {http.StatusUnprocessableEntity, codeInvalidSchema},
	apierr.IncompatibleSchema:   {http.StatusConflict, codeIncompatible},
	apierr.UnknownSubject:       {http.StatusNotFound, codeSubjectNotFound},
	apierr.UnknownSchemaVersion: {http.StatusNotFound, codeVersionNotFound},
	apierr.UnknownSchema:        {http.StatusNotFound, codeSchemaNotFound},
	apierr.InvalidArgument:      {http.StatusUnprocessableEntity, http.StatusUnprocessableEntity},
	apierr.MalformedRequest:     {http.StatusBadRequest, http.StatusBadRequest},
	apierr.Timeout:              {http.StatusInternalServerError, codeBackendStoreTimeout},
	apierr.Unauthenticated:      {http.StatusUnauthorized, codeUnauthorized},
	apierr.PermissionDenied:     {http.StatusForbidden, codeForbidden},
}

func toHTTPError(err error) *httpError {
	var he *httpError
	if errors.As(err, &he) {
		return he
	}
	apiErr := apierr.As(err)
	if m, ok := confluentCodes[apiErr.Code]; ok {
		return &httpError{status: m[0], code: m[1], message: apiErr.Message}
	}
	return &httpError{status: http.StatusInternalServerError, code: codeBackendStore, message: apiErr.Message}
}

// Handler serves the core of the Confluent Schema Registry REST API over
// reg, at the root (mount it with http.StripPrefix):
//
//	GET  /subjects                                   subject names
//	POST /subjects/{s}                               the version of a schema under s
//	GET  /subjects/{s}/versions                      version numbers
//	POST /subjects/{s}/versions                      register: {"id": n}
//	GET  /subjects/{s}/versions/{v}                  v a number, "latest" or -1
//	GET  /subjects/{s}/versions/{v}/schema           the schema text alone
//	GET  /schemas/ids/{id}                           {"schema": ..., "schemaType": ...}
//	GET  /schemas/types                              formats served
//	POST /compatibility/subjects/{s}/versions[/{v}]  {"is_compatible": bool}
//	GET|PUT /config, /config/{s}                     compatibility levels
//
// Every call is authorized with authorize (AllowAll for none) once its
// path is parsed, so an escaped path cannot name another subject than
// the one checked.
func Handler(reg *Registry, authorize Authorize) http.Handler {
	if authorize == nil {
		authorize = AllowAll
	}
	h := &handler{reg: reg, authorize: authorize}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", h.serve(func(*http.Request) (any, error) { return struct{}{}, nil }))
	mux.HandleFunc("GET /subjects", h.serve(h.subjects))
	mux.HandleFunc("POST /subjects/{subject}", h.serve(h.lookup))
	mux.HandleFunc("GET /subjects/{subject}/versions", h.serve(h.versions))
	mux.HandleFunc("POST /subjects/{subject}/versions", h.serve(h.register))
	mux.HandleFunc("GET /subjects/{subject}/versions/{version}", h.serve(h.version))
	mux.HandleFunc("GET /subjects/{subject}/versions/{version}/schema", h.serve(h.versionText))
	mux.HandleFunc("GET /schemas/ids/{id}", h.serve(h.byID))
	mux.HandleFunc("GET /schemas/types", h.serve(func(*http.Request) (any, error) { return []Format{JSONSchema, Protobuf, Avro}, nil }))
	mux.HandleFunc("POST /compatibility/subjects/{subject}/versions", h.serve(h.compatibility))
	mux.HandleFunc("POST /compatibility/subjects/{subject}/versions/{version}", h.serve(h.compatibility))
	mux.HandleFunc("GET /config", h.serve(h.getLevel))
	mux.HandleFunc("PUT /config", h.serve(h.putLevel))
	mux.HandleFunc("GET /config/{subject}", h.serve(h.getLevel))
	mux.HandleFunc("PUT /config/{subject}", h.serve(h.putLevel))
	return mux
}

type handler struct {
	reg       *Registry
	authorize Authorize
}

// rawText marks an answer sent as the schema text itself.
type rawText string

// serve runs one endpoint and writes its answer or error.
func (h *handler) serve(endpoint func(*http.Request) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		answer, err := endpoint(r)
		w.Header().Set("Content-Type", ContentType)
		if err != nil {
			he := toHTTPError(err)
			w.WriteHeader(he.status)
			_ = json.NewEncoder(w).Encode(map[string]any{"error_code": he.code, "message": he.message})
			return
		}
		if text, ok := answer.(rawText); ok {
			_, _ = io.WriteString(w, string(text))
			return
		}
		_ = json.NewEncoder(w).Encode(answer)
	}
}

// schemaRequest is the body of register, lookup and compatibility.
type schemaRequest struct {
	Schema     string            `json:"schema"`
	SchemaType string            `json:"schemaType"`
	References []json.RawMessage `json:"references"`
}

// versionAnswer is a version as Confluent spells it; schemaType is
// omitted for AVRO, as Confluent does.
type versionAnswer struct {
	Subject    string `json:"subject,omitempty"`
	ID         int64  `json:"id"`
	Version    int    `json:"version,omitempty"`
	SchemaType Format `json:"schemaType,omitempty"`
	Schema     string `json:"schema"`
}

func answerOf(v Version) versionAnswer {
	a := versionAnswer{Subject: v.Subject, ID: v.ID, Version: v.Version, SchemaType: v.Format, Schema: v.Text}
	if a.SchemaType == Avro {
		a.SchemaType = ""
	}
	return a
}

func decode(r *http.Request, v any) error {
	body := http.MaxBytesReader(nil, r.Body, MaxRequestBytes) // nil: the answer is ours to write
	if err := json.NewDecoder(body).Decode(v); err != nil {
		return apierr.New(apierr.MalformedRequest, "request body: %v", err)
	}
	return nil
}

// readSchema decodes a schema request into its format and text.
func readSchema(r *http.Request) (Format, string, error) {
	var req schemaRequest
	if err := decode(r, &req); err != nil {
		return "", "", err
	}
	if len(req.References) > 0 {
		return "", "", apierr.New(apierr.InvalidSchema, "schema references are not supported yet")
	}
	if req.Schema == "" {
		return "", "", apierr.New(apierr.InvalidSchema, "empty schema")
	}
	format, err := ParseFormat(req.SchemaType)
	return format, req.Schema, err
}

// parseVersion reads {version}: a number ≥ 1, "latest" or -1.
func parseVersion(r *http.Request) (int, error) {
	text := r.PathValue("version")
	if text == "" {
		return 0, nil // all versions (compatibility only)
	}
	if text == "latest" || text == "-1" {
		return Latest, nil
	}
	n, err := strconv.Atoi(text)
	if err != nil || n < 1 {
		return 0, &httpError{http.StatusUnprocessableEntity, codeInvalidVersion,
			"The specified version '" + text + "' is not a valid version id. Allowed values are between [1, 2^31-1] and the string \"latest\""}
	}
	return n, nil
}
