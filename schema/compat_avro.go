package schema

import "github.com/hamba/avro/v2"

// avroReadable applies Avro's schema resolution rules (the specification's
// "Schema Resolution": matching names or aliases, reader fields missing in
// the writer need a default, numeric promotion int→long→float→double,
// string↔bytes, enum symbols, unions), as hamba/avro implements them.
func avroReadable(reader, writer *Parsed) string {
	if err := avro.NewSchemaCompatibility().Compatible(reader.avro, writer.avro); err != nil {
		return err.Error()
	}
	return ""
}
