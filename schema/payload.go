package schema

import (
	"bytes"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/hamba/avro/v2"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
)

// payloadValidator checks a message value against one schema; the error
// says why it does not match.
type payloadValidator interface {
	validate(value []byte) error
}

// newPayloadValidator compiles a schema for validating values: JSON
// Schema as JSON text, Avro as Avro binary (the datum alone: the schema
// id travels in the message, not in a prefix), Protobuf as the binary
// encoding of the file's first message.
func newPayloadValidator(p *Parsed) (payloadValidator, error) {
	switch p.Format {
	case JSONSchema:
		if rule, err := compileJSONRule(p.json); err == nil {
			return jsonRuleValidator{rule}, nil
		}
		c := jsonschema.NewCompiler()
		c.UseLoader(noLoader{})
		if err := c.AddResource(schemaURL, p.json); err != nil {
			return nil, err
		}
		full, err := c.Compile(schemaURL)
		if err != nil {
			return nil, err
		}
		return jsonFullValidator{full}, nil
	case Avro:
		return avroValidator{p.avro}, nil
	case Protobuf:
		return protoValidator{p.proto.Messages().Get(0)}, nil
	}
	return nil, fmt.Errorf("schema: no validator for format %q", p.Format)
}

// errNotUTF8 refuses JSON that is not UTF-8 (RFC 8259 §8.1), which a
// decoder would otherwise store with U+FFFD in place of the bytes.
var errNotUTF8 = errors.New("not JSON: bytes that are not UTF-8")

type jsonRuleValidator struct{ rule *jsonRule }

func (v jsonRuleValidator) validate(value []byte) error {
	if !utf8.Valid(value) {
		return errNotUTF8
	}
	return jsonScan(v.rule, value)
}

type jsonFullValidator struct{ schema *jsonschema.Schema }

func (v jsonFullValidator) validate(value []byte) error {
	if !utf8.Valid(value) {
		return errNotUTF8
	}
	// The scanner's syntax pass first: it refuses what would cost the
	// full validator time out of proportion to the payload (huge exponents).
	if err := jsonScan(nil, value); err != nil {
		return err
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(value))
	if err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	return v.schema.Validate(doc)
}

type avroValidator struct{ schema avro.Schema }

func (v avroValidator) validate(value []byte) error {
	if err := validateAvro(v.schema, value); err != nil {
		return fmt.Errorf("not %s Avro: %w", v.schema.Type(), err)
	}
	return nil
}

type protoValidator struct {
	message protoreflect.MessageDescriptor
}

func (v protoValidator) validate(value []byte) error {
	if err := proto.Unmarshal(value, dynamicpb.NewMessage(v.message)); err != nil {
		return fmt.Errorf("not a %s: %w", v.message.FullName(), err)
	}
	return nil
}
