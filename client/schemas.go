package client

import (
	"context"

	"orderlog/proto/orderlogpb"
)

// Schemas is the schema registry (docs/schemas.md) at the first endpoint
// that answers. Subjects are named like topics; once authentication is
// on, registering and setting a subject's configuration need admin on its
// topic, reading needs read.
func (c *Client) Schemas() SchemaRegistry { return SchemaRegistry{c} }

// SchemaRegistry calls the Schemas service. Its errors are *apierr.Error:
// INCOMPATIBLE_SCHEMA, INVALID_SCHEMA, UNKNOWN_SUBJECT, ...
type SchemaRegistry struct{ c *Client }

func schemaCall[T any](ctx context.Context, c *Client, call func(ctx context.Context, sc orderlogpb.SchemasClient) (T, error)) (T, error) {
	return serviceCall(ctx, c, orderlogpb.NewSchemasClient, call)
}

// Register adds text, in format ("AVRO", "JSON" or "PROTOBUF"; "" is
// AVRO), as the next version of subject, or returns the version it
// already is. A version the subject's compatibility level refuses is
// INCOMPATIBLE_SCHEMA, whose message names the incompatibility.
func (r SchemaRegistry) Register(ctx context.Context, subject, format, text string) (*orderlogpb.SchemaVersion, error) {
	return schemaCall(ctx, r.c, func(ctx context.Context, sc orderlogpb.SchemasClient) (*orderlogpb.SchemaVersion, error) {
		return sc.RegisterSchema(ctx, &orderlogpb.RegisterSchemaRequest{Subject: subject, Format: format, Text: text})
	})
}

// Subjects lists the subjects the caller may read, sorted.
func (r SchemaRegistry) Subjects(ctx context.Context) ([]string, error) {
	resp, err := schemaCall(ctx, r.c, func(ctx context.Context, sc orderlogpb.SchemasClient) (*orderlogpb.ListSubjectsResponse, error) {
		return sc.ListSubjects(ctx, &orderlogpb.ListSubjectsRequest{})
	})
	return resp.GetSubjects(), err
}

// Versions lists a subject's versions, oldest first.
func (r SchemaRegistry) Versions(ctx context.Context, subject string) ([]*orderlogpb.SchemaVersion, error) {
	resp, err := schemaCall(ctx, r.c, func(ctx context.Context, sc orderlogpb.SchemasClient) (*orderlogpb.ListSchemaVersionsResponse, error) {
		return sc.ListSchemaVersions(ctx, &orderlogpb.ListSchemaVersionsRequest{Subject: subject})
	})
	return resp.GetVersions(), err
}

// Get returns a version of subject (0 or -1: the latest).
func (r SchemaRegistry) Get(ctx context.Context, subject string, version int32) (*orderlogpb.SchemaVersion, error) {
	return schemaCall(ctx, r.c, func(ctx context.Context, sc orderlogpb.SchemasClient) (*orderlogpb.SchemaVersion, error) {
		return sc.GetSchema(ctx, &orderlogpb.GetSchemaRequest{Subject: subject, Version: version})
	})
}

// ByID returns the schema with a global id, as a message's schema_id
// names it (subject and version unset: an id may be shared by subjects).
func (r SchemaRegistry) ByID(ctx context.Context, id uint32) (*orderlogpb.SchemaVersion, error) {
	return schemaCall(ctx, r.c, func(ctx context.Context, sc orderlogpb.SchemasClient) (*orderlogpb.SchemaVersion, error) {
		return sc.GetSchema(ctx, &orderlogpb.GetSchemaRequest{Id: id})
	})
}

// Check says whether text could be registered under subject: against
// version alone (-1: the latest), or with version 0 against every version
// the subject's level looks at. Incompatible is an answer (Compatible
// false, Messages saying why), not an error.
func (r SchemaRegistry) Check(ctx context.Context, subject string, version int32, format, text string) (*orderlogpb.CheckSchemaResponse, error) {
	return schemaCall(ctx, r.c, func(ctx context.Context, sc orderlogpb.SchemasClient) (*orderlogpb.CheckSchemaResponse, error) {
		return sc.CheckSchema(ctx, &orderlogpb.CheckSchemaRequest{Subject: subject, Version: version, Format: format, Text: text})
	})
}

// Config returns the compatibility level subject is held to (its own,
// else the global one) and its topic's validation mode; subject "" asks
// for the global level.
func (r SchemaRegistry) Config(ctx context.Context, subject string) (*orderlogpb.SchemaConfig, error) {
	return schemaCall(ctx, r.c, func(ctx context.Context, sc orderlogpb.SchemasClient) (*orderlogpb.SchemaConfig, error) {
		return sc.GetSchemaConfig(ctx, &orderlogpb.GetSchemaConfigRequest{Subject: subject})
	})
}

// SetConfig sets the non-empty fields of cfg (Compatibility, Validation)
// for cfg.Subject and returns the configuration as it then stands.
func (r SchemaRegistry) SetConfig(ctx context.Context, cfg *orderlogpb.SchemaConfig) (*orderlogpb.SchemaConfig, error) {
	return schemaCall(ctx, r.c, func(ctx context.Context, sc orderlogpb.SchemasClient) (*orderlogpb.SchemaConfig, error) {
		return sc.SetSchemaConfig(ctx, cfg)
	})
}
