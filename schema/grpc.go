package schema

import (
	"context"
	"errors"

	"orderlog/internal/apierr"
	"orderlog/proto/orderlogpb"
)

// Service serves the registry as the gRPC service Schemas
// (proto/orderlog.proto). It authorizes each call as Handler does, with
// the same Authorize, and answers errors as apierr errors, which carry
// their gRPC status code.
type Service struct {
	orderlogpb.UnimplementedSchemasServer
	reg       *Registry
	authorize Authorize
}

// NewService serves reg; authorize is AllowAll when nil.
func NewService(reg *Registry, authorize Authorize) *Service {
	if authorize == nil {
		authorize = AllowAll
	}
	return &Service{reg: reg, authorize: authorize}
}

// RegisterSchema adds a version to a subject, or returns the version the
// same schema already is.
func (s *Service) RegisterSchema(ctx context.Context, req *orderlogpb.RegisterSchemaRequest) (*orderlogpb.SchemaVersion, error) {
	if err := validSubject(req.Subject); err != nil {
		return nil, answerError(err) // before authorizing: "" would ask for every topic
	}
	if err := s.authorize(ctx, WriteAccess, req.Subject); err != nil {
		return nil, answerError(err)
	}
	format, err := requestedSchema(req.Format, req.Text)
	if err != nil {
		return nil, answerError(err)
	}
	v, err := s.reg.Register(ctx, req.Subject, format, req.Text)
	if err != nil {
		return nil, answerError(err)
	}
	return versionMessage(v), nil
}

// ListSubjects lists the subjects the caller may read, as GET /subjects.
func (s *Service) ListSubjects(ctx context.Context, _ *orderlogpb.ListSubjectsRequest) (*orderlogpb.ListSubjectsResponse, error) {
	all, err := s.reg.Subjects(ctx)
	if err != nil {
		return nil, answerError(err)
	}
	allowed := make([]string, 0, len(all))
	for _, subject := range all {
		err := s.authorize(ctx, ReadAccess, subject)
		if err == nil {
			allowed = append(allowed, subject)
		} else if apierr.As(err).Code != apierr.PermissionDenied {
			return nil, answerError(err)
		}
	}
	return &orderlogpb.ListSubjectsResponse{Subjects: allowed}, nil
}

// ListSchemaVersions returns a subject's versions, oldest first, with
// their text.
func (s *Service) ListSchemaVersions(ctx context.Context, req *orderlogpb.ListSchemaVersionsRequest) (*orderlogpb.ListSchemaVersionsResponse, error) {
	if err := validSubject(req.Subject); err != nil {
		return nil, answerError(err) // before authorizing: "" would ask for every topic
	}
	if err := s.authorize(ctx, ReadAccess, req.Subject); err != nil {
		return nil, answerError(err)
	}
	versions, err := s.reg.Versions(ctx, req.Subject)
	if err != nil {
		return nil, answerError(err)
	}
	resp := &orderlogpb.ListSchemaVersionsResponse{Versions: make([]*orderlogpb.SchemaVersion, len(versions))}
	for i, v := range versions {
		resp.Versions[i] = versionMessage(v)
	}
	return resp, nil
}

// GetSchema returns a schema by id (read on every topic, as
// GET /schemas/ids/{id}: an id may be shared by subjects) or a subject's
// version (read on its topic).
func (s *Service) GetSchema(ctx context.Context, req *orderlogpb.GetSchemaRequest) (*orderlogpb.SchemaVersion, error) {
	if req.Id != 0 {
		if err := s.authorize(ctx, ReadAccess, ""); err != nil {
			return nil, answerError(err)
		}
		v, err := s.reg.ByID(ctx, int64(req.Id))
		if err != nil {
			return nil, answerError(err)
		}
		return versionMessage(v), nil
	}
	if err := validSubject(req.Subject); err != nil {
		return nil, answerError(err)
	}
	if err := s.authorize(ctx, ReadAccess, req.Subject); err != nil {
		return nil, answerError(err)
	}
	version, err := requestedVersion(req.Version, Latest)
	if err != nil {
		return nil, answerError(err)
	}
	v, err := s.reg.Get(ctx, req.Subject, version)
	if err != nil {
		return nil, answerError(err)
	}
	return versionMessage(v), nil
}

// CheckSchema says whether a schema could be registered under a subject:
// an incompatible one is an answer (compatible false, and why), not an
// error, as the REST compatibility endpoint answers.
func (s *Service) CheckSchema(ctx context.Context, req *orderlogpb.CheckSchemaRequest) (*orderlogpb.CheckSchemaResponse, error) {
	if err := validSubject(req.Subject); err != nil {
		return nil, answerError(err) // before authorizing: "" would ask for every topic
	}
	if err := s.authorize(ctx, ReadAccess, req.Subject); err != nil {
		return nil, answerError(err)
	}
	version, err := requestedVersion(req.Version, 0)
	if err != nil {
		return nil, answerError(err)
	}
	format, err := requestedSchema(req.Format, req.Text)
	if err != nil {
		return nil, answerError(err)
	}
	err = s.reg.CheckCompatibility(ctx, req.Subject, version, format, req.Text)
	var incompatible *IncompatibleError
	if errors.As(err, &incompatible) {
		return &orderlogpb.CheckSchemaResponse{Compatible: false, Messages: []string{incompatible.Error()}}, nil
	}
	if err != nil {
		return nil, answerError(err)
	}
	return &orderlogpb.CheckSchemaResponse{Compatible: true}, nil
}

// GetSchemaConfig returns the level a subject is held to (its own, else
// the global one) and what produce checks of its topic; subject "" asks
// for the global level (validation is per subject only, so "").
func (s *Service) GetSchemaConfig(ctx context.Context, req *orderlogpb.GetSchemaConfigRequest) (*orderlogpb.SchemaConfig, error) {
	if err := s.authorize(ctx, ReadAccess, req.Subject); err != nil {
		return nil, answerError(err)
	}
	cfg, err := s.config(ctx, req.Subject)
	if err != nil {
		return nil, answerError(err)
	}
	return cfg, nil
}

// SetSchemaConfig sets the settings given (an empty field leaves its
// setting as it is; both empty change nothing) and returns the
// configuration as it then stands. Both are checked before either is
// written.
func (s *Service) SetSchemaConfig(ctx context.Context, req *orderlogpb.SchemaConfig) (*orderlogpb.SchemaConfig, error) {
	if err := s.authorize(ctx, WriteAccess, req.Subject); err != nil {
		return nil, answerError(err)
	}
	if err := s.setConfig(ctx, req); err != nil {
		return nil, answerError(err)
	}
	cfg, err := s.config(ctx, req.Subject)
	if err != nil {
		return nil, answerError(err)
	}
	return cfg, nil
}

func (s *Service) setConfig(ctx context.Context, req *orderlogpb.SchemaConfig) error {
	var level Level
	var validation Validation
	var err error
	if req.Compatibility != "" {
		if level, err = ParseLevel(req.Compatibility); err != nil {
			return err
		}
	}
	if req.Validation != "" {
		if req.Subject == "" {
			return apierr.New(apierr.InvalidArgument, "validation is set per subject (topic), not globally")
		}
		if validation, err = ParseValidation(req.Validation); err != nil {
			return err
		}
	}
	if level != "" {
		if err := s.reg.SetLevel(ctx, req.Subject, level); err != nil {
			return err
		}
	}
	if validation != "" {
		return s.reg.SetValidation(ctx, req.Subject, validation)
	}
	return nil
}

// config reads a subject's effective level and validation mode.
func (s *Service) config(ctx context.Context, subject string) (*orderlogpb.SchemaConfig, error) {
	level, err := s.reg.Level(ctx, subject)
	if err != nil {
		return nil, err
	}
	cfg := &orderlogpb.SchemaConfig{Subject: subject}
	if level == "" { // the subject has none of its own
		if level, err = s.reg.Level(ctx, ""); err != nil {
			return nil, err
		}
	}
	cfg.Compatibility = string(level)
	if subject != "" {
		validation, err := s.reg.Validation(ctx, subject)
		if err != nil {
			return nil, err
		}
		cfg.Validation = string(validation)
	}
	return cfg, nil
}

// requestedSchema checks a request's schema as readSchema does a REST
// body's: text given, within MaxRequestBytes, in a known format.
func requestedSchema(format, text string) (Format, error) {
	if text == "" {
		return "", apierr.New(apierr.InvalidSchema, "empty schema")
	}
	if len(text) > MaxRequestBytes {
		return "", apierr.New(apierr.InvalidSchema, "schema of %d bytes: at most %d", len(text), MaxRequestBytes)
	}
	return ParseFormat(format)
}

// requestedVersion reads a request's version: ≥ 1, -1 for the latest, or
// 0 for zero (Latest for GetSchema, every version for CheckSchema).
func requestedVersion(version int32, zero int) (int, error) {
	switch {
	case version == 0:
		return zero, nil
	case version == Latest || version >= 1:
		return int(version), nil
	}
	return 0, apierr.New(apierr.InvalidArgument, "version %d: want a number ≥ 1, or -1 for the latest", version)
}

func versionMessage(v Version) *orderlogpb.SchemaVersion {
	return &orderlogpb.SchemaVersion{Subject: v.Subject, Version: int32(v.Version), Id: uint32(v.ID), Format: string(v.Format), Text: v.Text}
}

// answerError is err as the API error in its chain; one without (an etcd
// failure) is INTERNAL, or TIMEOUT/UNAVAILABLE when the call's context
// ended, so gRPC never answers UNKNOWN.
func answerError(err error) error {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return apierr.New(apierr.Timeout, "schema registry: %v", err)
	case errors.Is(err, context.Canceled):
		return apierr.New(apierr.Unavailable, "schema registry: %v", err)
	}
	return apierr.As(err)
}
