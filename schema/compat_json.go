package schema

import (
	"fmt"
	"reflect"
	"slices"
	"sort"
)

// JSON Schema compatibility: reader can read writer's data when every
// document writer accepts, reader accepts too. Deciding that is
// undecidable in general; jsonReadable checks a sound subset and refuses
// what it does not analyse:
//
//   - type: reader's types must include writer's ("integer" is within
//     "number"); a reader with no type accepts any.
//   - required: every property reader requires, writer must require.
//   - properties present in both: checked recursively.
//   - a property only in writer: reader must accept it through its
//     additionalProperties (absent or true accepts; false refuses).
//   - a property only in reader: writer may have written it only through
//     its own additionalProperties, which reader's property schema must
//     accept (false writes nothing; absent/true writes anything, so only an
//     unconstrained reader property is safe there).
//   - additionalProperties: reader's must accept writer's.
//   - items (one schema): checked recursively.
//   - $ref anywhere: the two documents must be equal.
//   - annotations (title, description, ...) are ignored; any other keyword
//     (enum, minimum, pattern, anyOf, ...) in reader must be present in
//     writer with an equal value.
//
// The reason names the location as a JSON pointer.

// annotations do not constrain documents.
var annotations = map[string]bool{
	"$schema": true, "$id": true, "$comment": true, "title": true, "description": true,
	"default": true, "examples": true, "deprecated": true, "readOnly": true, "writeOnly": true,
}

// analysed are the keywords jsonReadable reasons about.
var analysed = map[string]bool{
	"type": true, "required": true, "properties": true, "additionalProperties": true, "items": true,
}

func jsonReadable(reader, writer any, at string) string {
	if hasRef(reader) || hasRef(writer) {
		if reflect.DeepEqual(reader, writer) {
			return ""
		}
		return at + ": schemas with $ref are only compatible when unchanged"
	}
	return jsonNode(reader, writer, at)
}

func jsonNode(reader, writer any, at string) string {
	if accepts, ok := reader.(bool); ok {
		if accepts || writer == false {
			return ""
		}
		return at + ": reader accepts nothing (false)"
	}
	if writer == false {
		return ""
	}
	r, _ := reader.(map[string]any)
	w, ok := writer.(map[string]any)
	if !ok { // writer is true: anything
		w = map[string]any{}
	}
	for _, check := range []func(r, w map[string]any, at string) string{
		jsonType, jsonRequired, jsonProperties, jsonAdditional, jsonItems, jsonOther,
	} {
		if reason := check(r, w, at); reason != "" {
			return reason
		}
	}
	return ""
}

func jsonType(r, w map[string]any, at string) string {
	readerTypes, writerTypes := typeSet(r["type"]), typeSet(w["type"])
	if readerTypes == nil {
		return ""
	}
	if writerTypes == nil {
		return fmt.Sprintf("%s: type %v added (the writer allowed any type)", at, sorted(readerTypes))
	}
	for t := range writerTypes {
		if !readerTypes[t] && !(t == "integer" && readerTypes["number"]) {
			return fmt.Sprintf("%s: type changed from %v to %v", at, sorted(writerTypes), sorted(readerTypes))
		}
	}
	return ""
}

func jsonRequired(r, w map[string]any, at string) string {
	writerRequired := stringSet(w["required"])
	for name := range stringSet(r["required"]) {
		if !writerRequired[name] {
			return fmt.Sprintf("%s: required property %q added", at, name)
		}
	}
	return ""
}

func jsonProperties(r, w map[string]any, at string) string {
	readerProps, writerProps := objectOf(r["properties"]), objectOf(w["properties"])
	for _, name := range sortedKeys(writerProps) {
		where := at + "/properties/" + name
		if readerProp, ok := readerProps[name]; ok {
			if reason := jsonNode(readerProp, writerProps[name], where); reason != "" {
				return reason
			}
			continue
		}
		if reason := jsonNode(additional(r), writerProps[name], where); reason != "" {
			return fmt.Sprintf("%s: the writer's property %q is not in the reader, whose additionalProperties refuse it (%s)", at, name, reason)
		}
	}
	for _, name := range sortedKeys(readerProps) {
		if _, ok := writerProps[name]; ok {
			continue
		}
		if reason := jsonNode(readerProps[name], additional(w), at+"/properties/"+name); reason != "" {
			return fmt.Sprintf("%s: property %q is only in the reader, and the writer's additionalProperties may hold any value under it (%s)", at, name, reason)
		}
	}
	return ""
}

func jsonAdditional(r, w map[string]any, at string) string {
	if reason := jsonNode(additional(r), additional(w), at+"/additionalProperties"); reason != "" {
		return fmt.Sprintf("%s: additionalProperties narrowed (%s)", at, reason)
	}
	return ""
}

func jsonItems(r, w map[string]any, at string) string {
	readerItems, ok := r["items"]
	if !ok {
		return ""
	}
	if _, tuple := readerItems.([]any); tuple {
		return "" // left to jsonOther's equality
	}
	writerItems, ok := w["items"]
	if !ok {
		writerItems = true
	}
	if _, tuple := writerItems.([]any); tuple {
		return at + "/items: items changed from a tuple to one schema"
	}
	return jsonNode(readerItems, writerItems, at+"/items")
}

func jsonOther(r, w map[string]any, at string) string {
	for _, key := range sortedKeys(r) {
		_, tuple := r[key].([]any)
		if annotations[key] || (analysed[key] && !(key == "items" && tuple)) {
			continue
		}
		if !reflect.DeepEqual(r[key], w[key]) {
			return fmt.Sprintf("%s: keyword %q added or changed (only type, properties, required, additionalProperties and items are analysed)", at, key)
		}
	}
	return ""
}

// additional is an object schema's additionalProperties (absent: true).
func additional(s map[string]any) any {
	if a, ok := s["additionalProperties"]; ok {
		return a
	}
	return true
}

func hasRef(node any) bool {
	switch n := node.(type) {
	case map[string]any:
		if _, ok := n["$ref"]; ok {
			return true
		}
		if _, ok := n["$dynamicRef"]; ok {
			return true
		}
		for _, v := range n {
			if hasRef(v) {
				return true
			}
		}
	case []any:
		return slices.ContainsFunc(n, hasRef)
	}
	return false
}

func typeSet(v any) map[string]bool {
	switch t := v.(type) {
	case string:
		return map[string]bool{t: true}
	case []any:
		return stringSet(t)
	}
	return nil
}

func stringSet(v any) map[string]bool {
	set := map[string]bool{}
	list, _ := v.([]any)
	for _, item := range list {
		if s, ok := item.(string); ok {
			set[s] = true
		}
	}
	return set
}

func objectOf(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func sorted(set map[string]bool) []string { return sortedKeys(set) }
