package parquetfile

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/parquet/schema"
)

// Field indices of the Arrow schema (the file's top-level columns, in order).
const (
	fieldLogOffset = iota
	fieldTopic
	fieldKey
	fieldProducerID
	fieldProducerSeq
	fieldMessageID
	fieldIngestTime
	fieldClientTime
	fieldPayload
	fieldHeaders
	fieldSchemaVersion
	fieldSchemaID // format version 2 on
	numFields
)

// Leaf column indices of the Parquet schema. The leaves of the fields
// before headers have their field's index; headers has two leaves
// (headers.list.element.key and .value), so schema_version is leaf 11 and
// schema_id leaf 12. A format version 1 file has no schema_id column.
const (
	leafLogOffset     = fieldLogOffset
	leafTopic         = fieldTopic
	leafKey           = fieldKey
	leafMessageID     = fieldMessageID
	leafHeaderKey     = fieldHeaders
	leafHeaderValue   = fieldHeaders + 1
	leafSchemaVersion = 11
	leafSchemaID      = 12
	numLeaves         = 13
	numLeavesV1       = 12
)

// Column paths as arrow-go's writer properties name them.
const (
	pathTopic     = "topic"
	pathKey       = "key"
	pathMessageID = "message_id"
)

// headerType is the element type of the headers list.
var headerType = arrow.StructOf(
	arrow.Field{Name: "key", Type: arrow.BinaryTypes.String},
	arrow.Field{Name: "value", Type: arrow.BinaryTypes.Binary},
)

// archiveSchema is the Arrow schema of an archive file: names, types, order
// and nullability are the format (docs/format/archive.md). Timestamps are
// microseconds with time zone UTC, which Parquet stores as
// TIMESTAMP(MICROS, isAdjustedToUTC=true).
var archiveSchema = arrow.NewSchema([]arrow.Field{
	{Name: "log_offset", Type: arrow.PrimitiveTypes.Int64},
	{Name: "topic", Type: arrow.BinaryTypes.String},
	{Name: "key", Type: arrow.BinaryTypes.Binary, Nullable: true},
	{Name: "producer_id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "producer_seq", Type: arrow.PrimitiveTypes.Int64},
	{Name: "message_id", Type: arrow.BinaryTypes.Binary, Nullable: true},
	{Name: "ingest_time", Type: arrow.FixedWidthTypes.Timestamp_us},
	{Name: "client_time", Type: arrow.FixedWidthTypes.Timestamp_us, Nullable: true},
	{Name: "payload", Type: arrow.BinaryTypes.Binary},
	{Name: "headers", Type: arrow.ListOfNonNullable(headerType)},
	{Name: "schema_version", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
	{Name: "schema_id", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
}, nil)

// expectedLeaves is the Parquet schema an archive file must have, one
// "path physical-type repetition logical-type" line per leaf; Open compares
// against it so a reader never decodes a file whose columns moved.
var expectedLeaves = [numLeaves]string{
	"log_offset INT64 required INT64",
	"topic BYTE_ARRAY required STRING",
	"key BYTE_ARRAY optional -",
	"producer_id INT64 required INT64",
	"producer_seq INT64 required INT64",
	"message_id BYTE_ARRAY optional -",
	"ingest_time INT64 required TIMESTAMP_MICROS_UTC",
	"client_time INT64 optional TIMESTAMP_MICROS_UTC",
	"payload BYTE_ARRAY required -",
	"headers.list.element.key BYTE_ARRAY required STRING",
	"headers.list.element.value BYTE_ARRAY required -",
	"schema_version INT32 optional INT32",
	"schema_id INT64 optional INT64",
}

// checkSchema reports whether the file's Parquet schema is the archive's
// of format version `version`: version 1 has every leaf but schema_id.
func checkSchema(s *schema.Schema, version int) error {
	leaves := numLeaves
	if version == 1 {
		leaves = numLeavesV1
	}
	if s.NumColumns() != leaves {
		return fmt.Errorf("%w: %d leaf columns, want %d", ErrCorrupt, s.NumColumns(), leaves)
	}
	for i, want := range expectedLeaves[:leaves] {
		col := s.Column(i)
		got := fmt.Sprintf("%s %s %s %s", col.Path(), col.PhysicalType(), col.SchemaNode().RepetitionType(), logicalName(col.LogicalType()))
		if got != want {
			return fmt.Errorf("%w: column %d is %q, want %q", ErrCorrupt, i, got, want)
		}
	}
	return nil
}

// logicalName names the logical types the archive uses, "-" for none and
// "other" for any other. (arrow-go hands out some logical types as values
// and some as pointers, hence the interfaces.)
func logicalName(t schema.LogicalType) string {
	type intType interface {
		BitWidth() int8
		IsSigned() bool
	}
	type timestampType interface {
		IsAdjustedToUTC() bool
		TimeUnit() schema.TimeUnitType
	}
	switch {
	case t == nil || t.Equals(schema.NoLogicalType{}):
		return "-"
	case t.Equals(schema.StringLogicalType{}):
		return "STRING"
	}
	if it, ok := t.(intType); ok && it.IsSigned() {
		return fmt.Sprintf("INT%d", it.BitWidth())
	}
	if ts, ok := t.(timestampType); ok && ts.IsAdjustedToUTC() && ts.TimeUnit() == schema.TimeUnitMicros {
		return "TIMESTAMP_MICROS_UTC"
	}
	return "other"
}
