package httpapi

import (
	"context"

	"orderlog/internal/apierr"
)

// SchemaVersions resolves a version of a subject (the topic) to its
// global schema id.
type SchemaVersions func(ctx context.Context, subject string, version int) (uint32, error)

// SetSchemaVersions lets POST /v1/messages name a schema as the
// specification does, metadata.schema_version; without it such a message
// is refused. Call it before serving.
func (h *Handler) SetSchemaVersions(resolve SchemaVersions) { h.schemaVersions = resolve }

// resolveSchemaVersions sets the schema id of each message that named a
// version; one that also named an id must name the same schema.
func (h *Handler) resolveSchemaVersions(ctx context.Context, call *ProduceCall) error {
	if call.SchemaVersions == nil {
		return nil
	}
	if h.schemaVersions == nil {
		return apierr.New(apierr.InvalidArgument, "metadata.schema_version needs the schema registry, which this node does not serve")
	}
	for i, version := range call.SchemaVersions {
		if version == 0 {
			continue
		}
		msg := call.Request.Messages[i]
		id, err := h.schemaVersions(ctx, msg.Topic, version)
		if err != nil {
			return withIndex(err, i, call.Batch)
		}
		if msg.SchemaId != 0 && msg.SchemaId != id {
			return withIndex(apierr.New(apierr.InvalidArgument, "schema_id %d is not version %d of %q (id %d)", msg.SchemaId, version, msg.Topic, id), i, call.Batch)
		}
		msg.SchemaId = id
	}
	return nil
}
