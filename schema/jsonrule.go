package schema

import (
	"errors"
	"fmt"
	"sort"
)

// jsonRule is a JSON Schema compiled for validation on produce, when the
// schema keeps to the subset the compatibility check also analyses (type,
// properties, required, additionalProperties, items, and annotations).
// jsonScan checks a payload against it in one pass over the bytes,
// without building the document: at the benchmark's 1 KiB that is what
// keeps validation within the produce path's budget. Other schemas are
// validated by the full validator (payload.go).
type jsonRule struct {
	nothing    bool        // the schema false: no instance is valid
	types      jsonTypeSet // 0: any type
	props      map[string]*jsonRule
	required   map[string]int // property → bit in the seen mask
	additional *jsonRule      // nil: any additional property
	items      *jsonRule      // nil: any item
	// fields is props and required in one list, for objects with few
	// properties: comparing a handful of names costs less than hashing.
	fields []jsonField
}

// jsonField is a property the rule names, declared or required or both.
type jsonField struct {
	name     string
	rule     *jsonRule // the property's rule (the additional one if not declared)
	declared bool
	bit      int // in the seen mask; -1 if not required
}

// maxListedFields is the most properties a rule looks up by comparing
// names rather than through its maps.
const maxListedFields = 16

// jsonTypeSet is a set of JSON Schema types.
type jsonTypeSet uint8

const (
	typeNull jsonTypeSet = 1 << iota
	typeBoolean
	typeObject
	typeArray
	typeNumber
	typeInteger // within number: a number with no fractional part
	typeString
)

var jsonTypeNames = map[string]jsonTypeSet{
	"null": typeNull, "boolean": typeBoolean, "object": typeObject, "array": typeArray,
	"number": typeNumber, "integer": typeInteger, "string": typeString,
}

func (t jsonTypeSet) String() string {
	var names []string
	for name, bit := range jsonTypeNames {
		if t&bit != 0 {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return fmt.Sprint(names)
}

// maxRequired bounds the required properties a rule tracks in its mask.
const maxRequired = 64

// errOutsideSubset says a schema needs the full validator.
var errOutsideSubset = errors.New("outside the compiled subset")

// compileJSONRule compiles a decoded JSON Schema document (as
// jsonschema.UnmarshalJSON returns it); errOutsideSubset when it uses a
// keyword the subset leaves out.
func compileJSONRule(doc any) (*jsonRule, error) {
	switch d := doc.(type) {
	case bool:
		return &jsonRule{nothing: !d}, nil
	case map[string]any:
		return compileJSONObject(d)
	}
	return nil, errOutsideSubset
}

func compileJSONObject(d map[string]any) (*jsonRule, error) {
	r := &jsonRule{}
	for key, v := range d {
		var err error
		switch {
		case annotations[key]:
		case key == "type":
			r.types, err = compileTypes(v)
		case key == "properties":
			r.props, err = compileProperties(v)
		case key == "required":
			r.required, err = compileRequired(v)
		case key == "additionalProperties":
			r.additional, err = compileJSONRule(v)
		case key == "items":
			r.items, err = compileJSONRule(v) // one schema for every item; an array of them is outside
		default:
			err = errOutsideSubset
		}
		if err != nil {
			return nil, err
		}
	}
	r.listFields()
	return r, nil
}

func (r *jsonRule) listFields() {
	names := map[string]bool{}
	for name := range r.props {
		names[name] = true
	}
	for name := range r.required {
		names[name] = true
	}
	if len(names) > maxListedFields {
		return
	}
	for name := range names {
		f := jsonField{name: name, bit: -1}
		f.rule, f.declared = r.props[name]
		if !f.declared {
			f.rule = r.additional
		}
		if bit, ok := r.required[name]; ok {
			f.bit = bit
		}
		r.fields = append(r.fields, f)
	}
}

func compileTypes(v any) (jsonTypeSet, error) {
	names, ok := v.([]any)
	if !ok {
		names = []any{v}
	}
	var t jsonTypeSet
	for _, n := range names {
		s, _ := n.(string)
		bit, known := jsonTypeNames[s]
		if !known {
			return 0, errOutsideSubset
		}
		t |= bit
	}
	if t == 0 {
		return 0, errOutsideSubset // "type": [] accepts nothing; leave it to the full validator
	}
	return t, nil
}

func compileProperties(v any) (map[string]*jsonRule, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return nil, errOutsideSubset
	}
	props := make(map[string]*jsonRule, len(m))
	for name, sub := range m {
		rule, err := compileJSONRule(sub)
		if err != nil {
			return nil, err
		}
		props[name] = rule
	}
	return props, nil
}

func compileRequired(v any) (map[string]int, error) {
	list, ok := v.([]any)
	if !ok || len(list) > maxRequired {
		return nil, errOutsideSubset
	}
	required := make(map[string]int, len(list))
	for _, n := range list {
		s, ok := n.(string)
		if !ok {
			return nil, errOutsideSubset
		}
		if _, dup := required[s]; !dup {
			required[s] = len(required)
		}
	}
	return required, nil
}

// property is the rule for an object's property name: its own, else the
// additional properties', else nil (anything); whether the rule declares
// it; and its bit in the seen mask, -1 if not required.
func (r *jsonRule) property(name []byte) (*jsonRule, bool, int) {
	if r.fields != nil || (len(r.props) == 0 && len(r.required) == 0) {
		for i := range r.fields {
			if f := &r.fields[i]; f.name == string(name) {
				return f.rule, f.declared, f.bit
			}
		}
		return r.additional, false, -1
	}
	bit, ok := r.required[string(name)]
	if !ok {
		bit = -1
	}
	if sub, ok := r.props[string(name)]; ok {
		return sub, true, bit
	}
	return r.additional, false, bit
}

// accepts says whether the rule's types admit a value of type t (for a
// number, integral says whether it has no fractional part).
func (r *jsonRule) accepts(t jsonTypeSet, integral bool) bool {
	if r.types == 0 || r.types&t != 0 {
		return true
	}
	return t == typeNumber && integral && r.types&typeInteger != 0
}
