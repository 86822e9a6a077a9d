package schema

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/hamba/avro/v2"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"google.golang.org/protobuf/reflect/protoreflect"

	"orderlog/internal/apierr"
)

// Format is a schema language, spelt as Confluent's schemaType.
type Format string

const (
	Avro       Format = "AVRO"
	JSONSchema Format = "JSON"
	Protobuf   Format = "PROTOBUF"
)

// ParseFormat reads a schemaType; empty means AVRO, as in Confluent.
func ParseFormat(s string) (Format, error) {
	switch Format(strings.ToUpper(s)) {
	case "", Avro:
		return Avro, nil
	case JSONSchema:
		return JSONSchema, nil
	case Protobuf:
		return Protobuf, nil
	}
	return "", apierr.New(apierr.InvalidSchema, "unknown schema type %q", s)
}

// Parsed is a schema that parsed in its format.
type Parsed struct {
	Format Format
	Text   string
	avro   avro.Schema                 // Format == Avro
	json   any                         // Format == JSONSchema: the decoded document
	proto  protoreflect.FileDescriptor // Format == Protobuf
}

// Parse parses text in format; an error is INVALID_SCHEMA.
func Parse(format Format, text string) (*Parsed, error) {
	switch format {
	case Avro:
		// A fresh cache per parse: the default one is process-wide and
		// would let one subject's named types leak into another's.
		s, err := avro.ParseWithCache(text, "", &avro.SchemaCache{})
		if err != nil {
			return nil, errInvalid(format, err)
		}
		return &Parsed{Format: format, Text: text, avro: s}, nil
	case JSONSchema:
		doc, err := parseJSONSchema(text)
		if err != nil {
			return nil, errInvalid(format, err)
		}
		return &Parsed{Format: format, Text: text, json: doc}, nil
	case Protobuf:
		file, err := parseProtobuf(text)
		if err != nil {
			return nil, errInvalid(format, err)
		}
		return &Parsed{Format: format, Text: text, proto: file}, nil
	}
	_, err := ParseFormat(string(format))
	return nil, err
}

// errNoLoader refuses every external $ref: a registry must not read files
// or URLs because a schema names them.
var errNoLoader = errors.New("external references are not supported")

type noLoader struct{}

func (noLoader) Load(url string) (any, error) { return nil, fmt.Errorf("%s: %w", url, errNoLoader) }

// schemaURL names a JSON Schema being compiled: an absolute URL, so that
// the compiler does not resolve a file name against the server's working
// directory and show it in errors.
const schemaURL = "urn:orderlog:schema"

func parseJSONSchema(text string) (any, error) {
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	c.UseLoader(noLoader{})
	if err := c.AddResource(schemaURL, doc); err != nil {
		return nil, err
	}
	if _, err := c.Compile(schemaURL); err != nil {
		return nil, err
	}
	return doc, nil
}

// fingerprint identifies format+text up to JSON whitespace: the key under
// which an id is reused.
func fingerprint(format Format, text string) string {
	var compact bytes.Buffer
	if err := json.Compact(&compact, []byte(text)); err != nil {
		compact.Reset()
		compact.WriteString(text)
	}
	sum := sha256.Sum256(append([]byte(string(format)+"\x00"), compact.Bytes()...))
	return hex.EncodeToString(sum[:])
}
