package schema

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/hamba/avro/v2"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

const orderJSONSchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "title": "order",
  "type": "object",
  "properties": {
    "id": {"type": "integer"},
    "customer": {"type": "string"},
    "amount": {"type": "number"},
    "paid": {"type": "boolean"},
    "note": {"type": ["string", "null"]},
    "items": {"type": "array", "items": {"type": "object", "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}}, "required": ["sku"]}},
    "tags": {"type": "object", "additionalProperties": {"type": "string"}}
  },
  "required": ["id", "customer"],
  "additionalProperties": false
}`

func mustValidator(t testing.TB, format Format, text string) payloadValidator {
	t.Helper()
	p, err := Parse(format, text)
	if err != nil {
		t.Fatal(err)
	}
	v, err := newPayloadValidator(p)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestJSONValidationOnProduce(t *testing.T) {
	v := mustValidator(t, JSONSchema, orderJSONSchema)
	if _, fast := v.(jsonRuleValidator); !fast {
		t.Fatalf("the order schema is within the compiled subset, got %T", v)
	}
	for _, c := range []struct {
		payload string
		wantErr string // "" = valid
	}{
		{`{"id": 1, "customer": "c"}`, ""},
		{` {"id": 1.0, "customer": "c\u00e9\"", "amount": -1.5e3, "paid": true, "note": null} `, ""},
		{`{"id": 1, "customer": "c", "items": [{"sku": "a", "qty": 2}, {"sku": "b"}], "tags": {"x": "y"}}`, ""},
		{`{"id": 1.5, "customer": "c"}`, "/id: expected [integer], got [number]"},
		{`{"id": 1, "customer": 7}`, "/customer: expected [string], got [number]"},
		{`{"id": 1}`, `/: missing required properties ["customer"]`},
		{`{"id": 1, "customer": "c", "extra": 1}`, "/extra: property not allowed"},
		{`{"id": 1, "customer": "c", "items": [{"qty": 1}]}`, `/items/0: missing required properties ["sku"]`},
		{`{"id": 1, "customer": "c", "tags": {"a/b": 1}}`, "/tags/a~1b: expected [string]"},
		{`[1]`, "/: expected [object], got array"},
		{`{"id": 1, "customer": "c"} x`, "data after the value"},
		{`{"id": 01, "customer": "c"}`, "not JSON"},
		{`{"id": 1, "customer": "c",}`, "not JSON"},
		{"{\"id\": 1, \"customer\": \"\xff\xfe\"}", "not UTF-8"},
		{`{"id": 1, "customer": "tab	in"}`, "control character"},
		{``, "unexpected end"},
		{`{"id": 1e999999999, "customer": "c"}`, "exponent beyond"},
		{`{"id": 1, "customer": "c", "amount": 0e-401}`, "exponent beyond"},
		{`{"id": 1e400, "customer": "c"}`, ""},
	} {
		err := v.validate([]byte(c.payload))
		switch {
		case c.wantErr == "" && err != nil:
			t.Errorf("%s: %v, want valid", c.payload, err)
		case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
			t.Errorf("%s: %v, want an error with %q", c.payload, err, c.wantErr)
		}
	}
}

func TestIsIntegral(t *testing.T) {
	for token, want := range map[string]bool{
		"1": true, "-0": true, "1.0": true, "1.50": false, "15e-1": false, "150e-1": true, "1e2": true,
		"0.5e1": true, "0.05e1": false, "1e-999999999999999999999": false, "1e999999999999999999999": true,
		"0.0e-99999999999999999999": true, "-12.000e0": true,
	} {
		if got := isIntegral([]byte(token), strings.ContainsAny(token, ".eE")); got != want {
			t.Errorf("isIntegral(%s) = %v, want %v", token, got, want)
		}
	}
}

// A schema outside the compiled subset is checked by the full validator.
func TestJSONOutsideTheSubsetUsesTheFullValidator(t *testing.T) {
	v := mustValidator(t, JSONSchema, `{"type": "object", "properties": {"n": {"type": "integer", "minimum": 3}}}`)
	if _, full := v.(jsonFullValidator); !full {
		t.Fatalf("minimum is outside the subset, got %T", v)
	}
	if err := v.validate([]byte(`{"n": 4}`)); err != nil {
		t.Fatal(err)
	}
	if err := v.validate([]byte(`{"n": 2}`)); err == nil {
		t.Fatal("n=2 below the minimum was accepted")
	}
	if err := v.validate([]byte("{\"n\": 4, \"s\": \"\xff\"}")); err == nil {
		t.Fatal("bytes that are not UTF-8 were accepted")
	}
}

func TestAvroAndProtobufValidation(t *testing.T) {
	const avroText = `{"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"}, {"name": "customer", "type": "string"}]}`
	v := mustValidator(t, Avro, avroText)
	good, err := avro.Marshal(avro.MustParse(avroText), map[string]any{"id": int64(7), "customer": "c"})
	if err != nil {
		t.Fatal(err)
	}
	if err := v.validate(good); err != nil {
		t.Fatalf("a datum of the schema: %v", err)
	}
	if err := v.validate(append(bytes.Clone(good), 0)); err == nil {
		t.Fatal("a datum with a byte after it was accepted")
	}
	if err := v.validate(good[:len(good)-1]); err == nil {
		t.Fatal("a cut datum was accepted")
	}

	p := mustValidator(t, Protobuf, `syntax = "proto3"; message Order { int64 id = 1; string customer = 2; }`)
	if err := p.validate([]byte{0x08, 0x07, 0x12, 0x01, 'c'}); err != nil {
		t.Fatalf("id=7 customer=c: %v", err)
	}
	if err := p.validate([]byte{0x12, 0x01, 0xff}); err == nil {
		t.Fatal("a string field that is not UTF-8 was accepted")
	}
	if err := p.validate([]byte{0x08}); err == nil {
		t.Fatal("a cut varint was accepted")
	}
}

// FuzzJSONRuleAgrees: the compiled subset never accepts what the full
// validator refuses, and refuses what it accepts only for a duplicate
// property name (the full validator keeps the last; every one is checked here).
func FuzzJSONRuleAgrees(f *testing.F) {
	fast := mustValidator(f, JSONSchema, orderJSONSchema).(jsonRuleValidator)
	c := jsonschema.NewCompiler()
	doc, _ := jsonschema.UnmarshalJSON(strings.NewReader(orderJSONSchema))
	if err := c.AddResource("s.json", doc); err != nil {
		f.Fatal(err)
	}
	full := jsonFullValidator{c.MustCompile("s.json")}
	for _, seed := range []string{`{"id": 1, "customer": "c"}`, `{"id": 1e0, "customer": "\u0041", "items": [{"sku": "s"}]}`,
		`{"id": 1, "customer": "c", "id": "x"}`, `{"id": 1e999999999, "customer": "c"}`, `{"id": -0.0, "customer": "", "note": null, "tags": {}}`, `[]`, `"x"`, `{`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		errFast, errFull := fast.validate(payload), full.validate(payload)
		switch {
		case errFast == nil && errFull != nil:
			t.Fatalf("compiled subset accepted what the full validator refuses (%v): %q", errFull, payload)
		case errFast != nil && errFull == nil && !hasDuplicateName(payload):
			t.Fatalf("compiled subset refused (%v) what the full validator accepts: %q", errFast, payload)
		}
	})
}

// hasDuplicateName says whether some object in a JSON document repeats a
// property name.
func hasDuplicateName(payload []byte) bool {
	d := json.NewDecoder(bytes.NewReader(payload))
	type frame struct {
		names  map[string]bool
		object bool
		key    bool // the next string token is a name
	}
	var stack []*frame
	for {
		tok, err := d.Token()
		if err == io.EOF || err != nil {
			return false
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{names: map[string]bool{}, object: true, key: true})
			continue
		case json.Delim('['):
			stack = append(stack, &frame{})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
			if len(stack) > 0 && stack[len(stack)-1].object {
				stack[len(stack)-1].key = true
			}
			continue
		}
		if top != nil && top.object {
			if top.key {
				name := tok.(string)
				if top.names[name] {
					return true
				}
				top.names[name] = true
				top.key = false
			} else {
				top.key = true
			}
		}
	}
}

// BenchmarkJSONValidate: one 1 KiB order against a compiled schema, the
// shape `make bench-schemas` produces.
func BenchmarkJSONValidate(b *testing.B) {
	v := mustValidator(b, JSONSchema, orderJSONSchema)
	payload := []byte(`{"id": 123456789, "customer": "c-4711", "amount": 1234.5, "paid": true, "items": [` +
		strings.Repeat(`{"sku": "SKU-01000", "qty": 3}, `, 20) + `{"sku": "x"}], "note": "` + strings.Repeat("x", 300) + `"}`)
	b.SetBytes(int64(len(payload)))
	for b.Loop() {
		if err := v.validate(payload); err != nil {
			b.Fatal(err)
		}
	}
}

// A JSON Schema that does not parse is refused without naming a path of
// the server's file system.
func TestSchemaErrorsNameNoServerPath(t *testing.T) {
	_, err := Parse(JSONSchema, `{"type": 5}`)
	if err == nil || strings.Contains(err.Error(), "file://") || !strings.Contains(err.Error(), schemaURL) {
		t.Fatalf("error %v, want one naming %s and no file", err, schemaURL)
	}
}

// A few bytes must not buy unbounded work: zero-byte items are counted
// against the datum's size, and recursion is bounded.
func TestAvroValidationIsBoundedByThePayload(t *testing.T) {
	nulls := mustValidator(t, Avro, `{"type": "array", "items": "null"}`)
	manyNulls := binary.AppendVarint(nil, 1<<26) // one block of 2^26 nulls in 5 bytes
	manyNulls = append(manyNulls, 0)
	start := time.Now()
	if err := nulls.validate(manyNulls); err == nil || !strings.Contains(err.Error(), "items") {
		t.Fatalf("2^26 nulls in %d bytes: %v, want refused for its item count", len(manyNulls), err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("refusing took %v", d)
	}
	few := append(binary.AppendVarint(nil, 100), 0)
	if err := nulls.validate(few); err != nil {
		t.Fatalf("100 nulls: %v", err)
	}
	list := mustValidator(t, Avro, `{"type": "record", "name": "Node", "fields": [{"name": "next", "type": ["null", "Node"]}]}`)
	deep := append(bytes.Repeat([]byte{2}, 5000), 0) // 5000 levels of branch 1, then null
	if err := list.validate(deep); err == nil || !strings.Contains(err.Error(), "deeper") {
		t.Fatalf("5000 nested records: %v, want refused for depth", err)
	}
	if err := list.validate(append(bytes.Repeat([]byte{2}, 50), 0)); err != nil {
		t.Fatalf("50 nested records: %v", err)
	}
	str := mustValidator(t, Avro, `"string"`)
	if err := str.validate([]byte{4, 0xff, 0xfe}); err == nil {
		t.Fatal("a string that is not UTF-8 was accepted")
	}
	enum := mustValidator(t, Avro, `{"type": "enum", "name": "E", "symbols": ["A", "B"]}`)
	if err := enum.validate([]byte{4}); err == nil {
		t.Fatal("enum index 2 of 2 symbols was accepted")
	}
}

// The full validator's path refuses huge exponents before deciding, in
// time proportional to the exponent, whether a number is an integer.
func TestFullJSONValidationIsBoundedByThePayload(t *testing.T) {
	v := mustValidator(t, JSONSchema, `{"type": "array", "items": {"type": "integer", "minimum": 0}}`)
	payload := "[" + strings.TrimSuffix(strings.Repeat("1e999999,", 100), ",") + "]"
	start := time.Now()
	if err := v.validate([]byte(payload)); err == nil || !strings.Contains(err.Error(), "exponent beyond") {
		t.Fatalf("100 numbers of exponent 999999: %v, want refused", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("refusing took %v", d)
	}
}

// specialIn8 never misses a byte stringSpecial marks, in any position.
func TestSpecialIn8FindsEverySpecialByte(t *testing.T) {
	for pos := range 8 {
		for c := range 256 {
			word := bytes.Repeat([]byte{'a'}, 8)
			word[pos] = byte(c)
			if stringSpecial[c] && !specialIn8(binary.LittleEndian.Uint64(word)) {
				t.Fatalf("byte %#x at %d missed", c, pos)
			}
		}
	}
	if specialIn8(binary.LittleEndian.Uint64([]byte("abc\xc3\xa9xyz"))) {
		t.Fatal("a false alarm on plain text")
	}
}
