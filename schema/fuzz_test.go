package schema

import (
	"errors"
	"testing"
)

// FuzzParseAndCheck feeds schema text, as any client may send it, to the
// three parsers and, when it parses, to every level against a fixed version in
// both directions: nothing may panic, and a refusal is an
// *IncompatibleError.
func FuzzParseAndCheck(f *testing.F) {
	for _, c := range avroChanges {
		f.Add(c.v2)
	}
	for _, c := range jsonChanges {
		f.Add(c.v2)
	}
	for _, c := range protobufChanges {
		f.Add(c.v2)
	}
	for _, seed := range []string{``, `{`, `"int"`, `true`, `false`, `{"type":["integer","null"]}`,
		`{"type":"record","name":"L","fields":[{"name":"next","type":["null","L"]}]}`,
		`{"properties":{"a":{"items":{"additionalProperties":{"type":"string"}}}}}`} {
		f.Add(seed)
	}
	bases := map[Format]*Parsed{}
	for format, text := range map[Format]string{
		Avro: avroRecord(avroID), JSONSchema: jsonObject(true, `"id"`, jsonID), Protobuf: proto3("int64 id = 1; Line line = 2; message Line { string sku = 1; }"),
	} {
		p, err := Parse(format, text)
		if err != nil {
			f.Fatal(err)
		}
		bases[format] = p
	}
	levels := []Level{Backward, Forward, Full, FullTransitive}
	f.Fuzz(func(t *testing.T, text string) {
		for format, base := range bases {
			candidate, err := Parse(format, text)
			if err != nil {
				if apiCode(err) != "INVALID_SCHEMA" {
					t.Fatalf("%s: %v", format, err)
				}
				continue
			}
			for _, level := range levels {
				for _, err := range []error{Check(level, candidate, []*Parsed{base}), Check(level, base, []*Parsed{candidate})} {
					var incompatible *IncompatibleError
					if err != nil && !errors.As(err, &incompatible) {
						t.Fatalf("%s %s: %v", format, level, err)
					}
				}
			}
			if Check(Full, candidate, []*Parsed{candidate}) != nil {
				t.Fatalf("%s: a schema is not compatible with itself: %s", format, text)
			}
		}
	})
}
