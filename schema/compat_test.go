package schema

import (
	"errors"
	"strings"
	"testing"
)

// A change from v1 to v2 and, per level, "" if accepted or a fragment of
// the refusal.
type change struct {
	v1, v2                  string
	backward, forward, full string
}

func avroRecord(fields string) string {
	return `{"type":"record","name":"User","namespace":"orderlog.test","fields":[` + fields + `]}`
}

const (
	avroID    = `{"name":"id","type":"int"}`
	avroName  = `{"name":"name","type":"string"}`
	missing   = "is missing in writer schema and has no default"
	jsonTypeE = "type changed"
)

var avroChanges = map[string]change{
	"add_optional_field": {
		v1: avroRecord(avroID + `,` + avroName),
		v2: avroRecord(avroID + `,` + avroName + `,{"name":"email","type":["null","string"],"default":null}`),
	},
	"add_required_field": {
		v1:       avroRecord(avroID + `,` + avroName),
		v2:       avroRecord(avroID + `,` + avroName + `,{"name":"email","type":"string"}`),
		backward: "reader field email " + missing, full: "reader field email " + missing,
	},
	"remove_field": {
		v1:      avroRecord(avroID + `,` + avroName),
		v2:      avroRecord(avroID),
		forward: "reader field name " + missing, full: "reader field name " + missing,
	},
	"remove_field_with_default": {
		v1: avroRecord(avroID + `,{"name":"name","type":"string","default":""}`),
		v2: avroRecord(avroID),
	},
	"rename_field": {
		v1:       avroRecord(avroID + `,` + avroName),
		v2:       avroRecord(avroID + `,{"name":"fullName","type":"string"}`),
		backward: "reader field fullName " + missing, forward: "reader field name " + missing, full: "fullName",
	},
	"rename_field_with_alias": {
		v1:      avroRecord(avroID + `,` + avroName),
		v2:      avroRecord(avroID + `,{"name":"fullName","type":"string","aliases":["name"]}`),
		forward: "reader field name " + missing, full: "reader field name " + missing,
	},
	"widen_int_to_long": {
		v1:      avroRecord(avroID),
		v2:      avroRecord(`{"name":"id","type":"long"}`),
		forward: "reader schema int not compatible with writer schema long", full: "int not compatible",
	},
	"change_type_to_string": {
		v1:       avroRecord(avroID),
		v2:       avroRecord(`{"name":"id","type":"string"}`),
		backward: "reader schema string not compatible with writer schema int", forward: "not compatible", full: "not compatible",
	},
}

func jsonObject(closed bool, required string, props string) string {
	s := `{"type":"object","properties":{` + props + `},"required":[` + required + `]`
	if closed {
		s += `,"additionalProperties":false`
	}
	return s + `}`
}

const (
	jsonID    = `"id":{"type":"integer"}`
	jsonName  = `"name":{"type":"string"}`
	jsonEmail = `"email":{"type":"string"}`
)

var jsonChanges = map[string]change{
	"add_optional_field_open": {
		v1:       jsonObject(false, `"id"`, jsonID+`,`+jsonName),
		v2:       jsonObject(false, `"id"`, jsonID+`,`+jsonName+`,`+jsonEmail),
		backward: `property "email" is only in the reader`, full: `property "email" is only in the reader`,
	},
	"add_optional_field_closed": {
		v1:      jsonObject(true, `"id"`, jsonID+`,`+jsonName),
		v2:      jsonObject(true, `"id"`, jsonID+`,`+jsonName+`,`+jsonEmail),
		forward: `the writer's property "email" is not in the reader`, full: `"email"`,
	},
	"add_unconstrained_field_open": {
		v1: jsonObject(false, `"id"`, jsonID),
		v2: jsonObject(false, `"id"`, jsonID+`,"note":{}`),
	},
	"add_required_field": {
		v1:       jsonObject(false, `"id"`, jsonID+`,`+jsonName),
		v2:       jsonObject(false, `"id","name"`, jsonID+`,`+jsonName),
		backward: `required property "name" added`, full: `required property "name" added`,
	},
	"remove_field_open": {
		v1:      jsonObject(false, `"id","name"`, jsonID+`,`+jsonName),
		v2:      jsonObject(false, `"id"`, jsonID),
		forward: `required property "name" added`, full: `required property "name" added`,
	},
	"remove_field_closed": {
		v1:       jsonObject(true, `"id"`, jsonID+`,`+jsonName),
		v2:       jsonObject(true, `"id"`, jsonID),
		backward: `the writer's property "name" is not in the reader`, full: `the writer's property "name"`,
	},
	"rename_field": {
		v1:       jsonObject(false, `"id","name"`, jsonID+`,`+jsonName),
		v2:       jsonObject(false, `"id","fullName"`, jsonID+`,"fullName":{"type":"string"}`),
		backward: `required property "fullName" added`, forward: `required property "name" added`, full: `"fullName"`,
	},
	"widen_integer_to_number": {
		v1:      jsonObject(false, `"id"`, jsonID),
		v2:      jsonObject(false, `"id"`, `"id":{"type":"number"}`),
		forward: "#/properties/id: " + jsonTypeE + " from [number] to [integer]", full: jsonTypeE,
	},
	"change_type_to_string": {
		v1:       jsonObject(false, `"id"`, jsonID),
		v2:       jsonObject(false, `"id"`, `"id":{"type":"string"}`),
		backward: "#/properties/id: type changed from [integer] to [string]", forward: jsonTypeE, full: jsonTypeE,
	},
	"add_unanalysed_keyword": {
		v1:       jsonObject(false, `"id"`, jsonID),
		v2:       jsonObject(false, `"id"`, `"id":{"type":"integer","minimum":0}`),
		backward: `keyword "minimum" added or changed`, full: `"minimum"`,
	},
}

func proto3(fields string) string {
	return "syntax = \"proto3\";\npackage orderlog.test;\nmessage Order {\n" + fields + "}\n"
}

func proto2(fields string) string {
	return "syntax = \"proto2\";\npackage orderlog.test;\nmessage Order {\n" + fields + "}\n"
}

var protobufChanges = map[string]change{
	"add_field": {
		v1: proto3("int64 id = 1; string name = 2;"),
		v2: proto3("int64 id = 1; string name = 2; string email = 3;"),
	},
	"add_required_field": {
		v1:       proto2("required int64 id = 1;"),
		v2:       proto2("required int64 id = 1; required string email = 2;"),
		backward: "orderlog.test.Order: required field email (2) added", full: "required field email (2) added",
	},
	"remove_field": {
		v1: proto3("int64 id = 1; string name = 2;"),
		v2: proto3("int64 id = 1;"),
	},
	"remove_required_field": {
		v1:      proto2("required int64 id = 1; required string name = 2;"),
		v2:      proto2("required int64 id = 1;"),
		forward: "required field name (2) added", full: "required field name (2) added",
	},
	"rename_field": {
		v1: proto3("int64 id = 1; string name = 2;"),
		v2: proto3("int64 id = 1; string full_name = 2;"),
	},
	"widen_int32_to_int64": {
		v1: proto3("int32 id = 1;"),
		v2: proto3("int64 id = 1;"),
	},
	"change_type_to_string": {
		v1:       proto3("int64 id = 1;"),
		v2:       proto3("string id = 1;"),
		backward: "orderlog.test.Order.id (1): type changed from int64 to string", forward: "type changed from string to int64", full: "type changed",
	},
	"make_repeated": {
		v1:       proto3("string tag = 1;"),
		v2:       proto3("repeated string tag = 1;"),
		backward: "changed between repeated and singular", forward: "repeated", full: "repeated",
	},
	"change_nested_message_field": {
		v1:       proto3("Line line = 1; message Line { int64 sku = 1; }"),
		v2:       proto3("Line line = 1; message Line { double sku = 1; }"),
		backward: "orderlog.test.Order.Line.sku (1): type changed from int64 to double", forward: "type changed", full: "type changed",
	},
}

func TestCompatibilityOfClassicChanges(t *testing.T) {
	for format, changes := range map[Format]map[string]change{Avro: avroChanges, JSONSchema: jsonChanges, Protobuf: protobufChanges} {
		for name, c := range changes {
			v1, v2 := mustParse(t, format, c.v1), mustParse(t, format, c.v2)
			levels := map[Level]string{None: "", Backward: c.backward, Forward: c.forward, Full: c.full,
				BackwardTransitive: c.backward, ForwardTransitive: c.forward, FullTransitive: c.full}
			for level, want := range levels {
				t.Run(string(format)+"/"+name+"/"+string(level), func(t *testing.T) {
					assertCheck(t, Check(level, v2, []*Parsed{v1}), want)
				})
			}
		}
	}
}

// Transitive levels check every version; the plain ones only the latest.
func TestTransitiveLevelsCheckEveryVersion(t *testing.T) {
	// v1 {id}, v2 {} , v3 {id:string}: v3 reads v2's data (no id) only if
	// id has a default; against v1 the type changed.
	v1 := mustParse(t, Avro, avroRecord(avroID))
	v2 := mustParse(t, Avro, avroRecord(``))
	v3 := mustParse(t, Avro, avroRecord(`{"name":"id","type":"string","default":""}`))
	assertCheck(t, Check(Backward, v3, []*Parsed{v1, v2}), "")
	assertCheck(t, Check(BackwardTransitive, v3, []*Parsed{v1, v2}), "version 1")
	assertCheck(t, Check(FullTransitive, v3, []*Parsed{v1, v2}), "version 1")
}

func TestChangingFormatIsIncompatible(t *testing.T) {
	v1 := mustParse(t, Avro, avroRecord(avroID))
	v2 := mustParse(t, JSONSchema, jsonObject(false, ``, jsonID))
	assertCheck(t, Check(Backward, v2, []*Parsed{v1}), "schema type changed from AVRO to JSON")
	assertCheck(t, Check(None, v2, []*Parsed{v1}), "")
}

func TestJSONSchemaWithRefIsCompatibleOnlyWhenUnchanged(t *testing.T) {
	text := `{"$defs":{"n":{"type":"string"}},"type":"object","properties":{"name":{"$ref":"#/$defs/n"}}}`
	v1 := mustParse(t, JSONSchema, text)
	assertCheck(t, Check(Full, mustParse(t, JSONSchema, text), []*Parsed{v1}), "")
	changed := strings.Replace(text, `"string"`, `"integer"`, 1)
	assertCheck(t, Check(Backward, mustParse(t, JSONSchema, changed), []*Parsed{v1}), "$ref are only compatible when unchanged")
}

func TestParseRefusesBadSchemas(t *testing.T) {
	cases := map[string]struct {
		format Format
		text   string
	}{
		"avro_not_json":         {Avro, `{"type":`},
		"avro_unknown_type":     {Avro, `{"type":"record","name":"R","fields":[{"name":"a","type":"nope"}]}`},
		"json_not_json":         {JSONSchema, `{`},
		"json_bad_keyword":      {JSONSchema, `{"type":"objekt"}`},
		"json_external_ref":     {JSONSchema, `{"$ref":"file:///etc/passwd"}`},
		"json_bad_required":     {JSONSchema, `{"required":"id"}`},
		"protobuf_syntax":       {Protobuf, `syntax = "proto3"; message {`},
		"protobuf_no_message":   {Protobuf, `syntax = "proto3";`},
		"protobuf_import":       {Protobuf, "syntax = \"proto3\";\nimport \"/etc/passwd\";\nmessage M {}"},
		"protobuf_unknown_type": {Protobuf, "syntax = \"proto3\";\nmessage M { Nope n = 1; }"},
		"unknown_format":        {Format("XML"), `<a/>`},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Parse(c.format, c.text)
			if code := apiCode(err); code != "INVALID_SCHEMA" {
				t.Fatalf("got %v (%s), want INVALID_SCHEMA", err, code)
			}
		})
	}
}

func TestProtobufMayImportWellKnownTypes(t *testing.T) {
	mustParse(t, Protobuf, "syntax = \"proto3\";\nimport \"google/protobuf/timestamp.proto\";\nmessage M { google.protobuf.Timestamp at = 1; }")
}

func TestFingerprintIgnoresJSONWhitespaceOnly(t *testing.T) {
	a := fingerprint(Avro, `{"type": "string"}`)
	if a != fingerprint(Avro, "{\"type\":\n\"string\"}") {
		t.Fatal("whitespace changed the fingerprint")
	}
	if a == fingerprint(JSONSchema, `{"type": "string"}`) || a == fingerprint(Avro, `{"type": "bytes"}`) {
		t.Fatal("format or text did not change the fingerprint")
	}
}

func mustParse(t *testing.T, format Format, text string) *Parsed {
	t.Helper()
	p, err := Parse(format, text)
	if err != nil {
		t.Fatalf("parse %s: %v", text, err)
	}
	return p
}

func assertCheck(t *testing.T, err error, want string) {
	t.Helper()
	if want == "" {
		if err != nil {
			t.Fatalf("refused: %v", err)
		}
		return
	}
	var incompatible *IncompatibleError
	if !errors.As(err, &incompatible) {
		t.Fatalf("accepted or wrong error (%v), want refusal with %q", err, want)
	}
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("refusal %q does not say %q", err, want)
	}
}
