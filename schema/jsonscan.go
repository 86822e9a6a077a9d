package schema

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// maxJSONDepth bounds nesting, as encoding/json does.
const maxJSONDepth = 10000

// maxExponent bounds a number's exponent: beyond it a double is infinite
// or zero, and deciding whether such a number is an integer costs the full
// validator time in proportion to the exponent (seconds for 1e999999).
const maxExponent = 400

// jsonScan checks that b is one JSON value (RFC 8259; b is already known
// to be UTF-8) that rule accepts. The error names the location as a JSON
// pointer.
func jsonScan(rule *jsonRule, b []byte) error {
	s := jsonScanner{b: b}
	s.space()
	if err := s.value(rule, 0); err != nil {
		return err
	}
	s.space()
	if s.i != len(s.b) {
		return s.syntax("data after the value")
	}
	return nil
}

type jsonScanner struct {
	b []byte
	i int
}

// scanError is a mismatch or a syntax error at a location; the location
// is built as the scan unwinds, so a valid payload never builds one.
type scanError struct {
	at  []string // innermost first
	msg string
}

func (e *scanError) Error() string {
	var at strings.Builder
	for i := len(e.at) - 1; i >= 0; i-- {
		at.WriteByte('/')
		at.WriteString(strings.NewReplacer("~", "~0", "/", "~1").Replace(e.at[i]))
	}
	if at.Len() == 0 {
		at.WriteByte('/')
	}
	return at.String() + ": " + e.msg
}

func within(err error, segment string) error {
	if e, ok := err.(*scanError); ok {
		e.at = append(e.at, segment)
	}
	return err
}

func (s *jsonScanner) syntax(what string) error {
	return &scanError{msg: fmt.Sprintf("not JSON: %s at byte %d", what, s.i)}
}

func mismatch(format string, args ...any) error {
	return &scanError{msg: fmt.Sprintf(format, args...)}
}

func (s *jsonScanner) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// value scans one value; rule nil accepts any.
func (s *jsonScanner) value(rule *jsonRule, depth int) error {
	if depth >= maxJSONDepth {
		return s.syntax("nesting too deep")
	}
	if s.i >= len(s.b) {
		return s.syntax("unexpected end")
	}
	if rule != nil && rule.nothing {
		return mismatch("the schema accepts no value here (false)")
	}
	c := s.b[s.i]
	var t jsonTypeSet
	integral := false
	switch {
	case c == '{':
		return s.object(rule, depth)
	case c == '[':
		return s.array(rule, depth)
	case c == '"':
		if _, err := s.str(); err != nil {
			return err
		}
		t = typeString
	case c == 't':
		t = typeBoolean
		if err := s.literal("true"); err != nil {
			return err
		}
	case c == 'f':
		t = typeBoolean
		if err := s.literal("false"); err != nil {
			return err
		}
	case c == 'n':
		t = typeNull
		if err := s.literal("null"); err != nil {
			return err
		}
	case c == '-' || c >= '0' && c <= '9':
		t = typeNumber
		start, fraction, err := s.number()
		if err != nil {
			return err
		}
		if rule != nil && rule.types != 0 && rule.types&typeNumber == 0 {
			integral = isIntegral(s.b[start:s.i], fraction)
		}
	default:
		return s.syntax(fmt.Sprintf("unexpected %q", c))
	}
	if rule != nil && !rule.accepts(t, integral) {
		return mismatch("expected %s, got %s", rule.types, t)
	}
	return nil
}

func (s *jsonScanner) literal(word string) error {
	if !strings.HasPrefix(string(s.b[s.i:min(len(s.b), s.i+len(word))]), word) {
		return s.syntax("bad literal")
	}
	s.i += len(word)
	return nil
}

func (s *jsonScanner) object(rule *jsonRule, depth int) error {
	if rule != nil && !rule.accepts(typeObject, false) {
		return mismatch("expected %s, got object", rule.types)
	}
	s.i++ // {
	var seen uint64
	s.space()
	if s.i < len(s.b) && s.b[s.i] == '}' {
		s.i++
		return checkRequired(rule, seen)
	}
	for {
		if s.i >= len(s.b) || s.b[s.i] != '"' {
			return s.syntax("expected a property name")
		}
		name, err := s.str()
		if err != nil {
			return err
		}
		s.space()
		if s.i >= len(s.b) || s.b[s.i] != ':' {
			return s.syntax("expected ':'")
		}
		s.i++
		s.space()
		var sub *jsonRule
		if rule != nil {
			var declared bool
			var bit int
			sub, declared, bit = rule.property(name)
			if !declared && sub != nil && sub.nothing {
				return within(mismatch("property not allowed (additionalProperties)"), string(name))
			}
			if bit >= 0 {
				seen |= 1 << bit
			}
		}
		if err := s.value(sub, depth+1); err != nil {
			return within(err, string(name))
		}
		s.space()
		if s.i >= len(s.b) {
			return s.syntax("unexpected end in an object")
		}
		switch s.b[s.i] {
		case ',':
			s.i++
			s.space()
		case '}':
			s.i++
			return checkRequired(rule, seen)
		default:
			return s.syntax("expected ',' or '}'")
		}
	}
}

func checkRequired(rule *jsonRule, seen uint64) error {
	if rule == nil || len(rule.required) == 0 || seen == 1<<len(rule.required)-1 {
		return nil
	}
	var missing []string
	for name, bit := range rule.required {
		if seen&(1<<bit) == 0 {
			missing = append(missing, name)
		}
	}
	slices.Sort(missing)
	return mismatch("missing required properties %q", missing)
}

func (s *jsonScanner) array(rule *jsonRule, depth int) error {
	if rule != nil && !rule.accepts(typeArray, false) {
		return mismatch("expected %s, got array", rule.types)
	}
	var items *jsonRule
	if rule != nil {
		items = rule.items
	}
	s.i++ // [
	s.space()
	if s.i < len(s.b) && s.b[s.i] == ']' {
		s.i++
		return nil
	}
	for n := 0; ; n++ {
		if err := s.value(items, depth+1); err != nil {
			return within(err, strconv.Itoa(n))
		}
		s.space()
		if s.i >= len(s.b) {
			return s.syntax("unexpected end in an array")
		}
		switch s.b[s.i] {
		case ',':
			s.i++
			s.space()
		case ']':
			s.i++
			return nil
		default:
			return s.syntax("expected ',' or ']'")
		}
	}
}

// stringSpecial marks the bytes a string scan stops at: the closing
// quote, a backslash, and control characters (not allowed unescaped).
var stringSpecial = func() (t [256]bool) {
	for c := range 0x20 {
		t[c] = true
	}
	t['"'], t['\\'] = true, true
	return t
}()

// specialIn8 says whether one of 8 bytes may be one stringSpecial marks
// (a control character, '"' or a backslash), testing all 8 at once with
// the zero-byte trick; a false alarm only sends the scan to the byte loop.
func specialIn8(x uint64) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	control := (x - ones*0x20) &^ x & highs
	q := x ^ ones*'"'
	b := x ^ ones*'\\'
	return control|((q-ones)&^q&highs)|((b-ones)&^b&highs) != 0
}

// str scans a string and returns its value: the raw bytes when it has no
// escapes (no copy), else the decoded value.
func (s *jsonScanner) str() ([]byte, error) {
	start := s.i
	s.i++ // "
	escaped := false
	for {
		for s.i+8 <= len(s.b) && !specialIn8(binary.LittleEndian.Uint64(s.b[s.i:])) {
			s.i += 8
		}
		for s.i < len(s.b) && !stringSpecial[s.b[s.i]] {
			s.i++
		}
		if s.i >= len(s.b) {
			return nil, s.syntax("unterminated string")
		}
		switch c := s.b[s.i]; {
		case c == '"':
			s.i++
			if !escaped {
				return s.b[start+1 : s.i-1], nil
			}
			var v string
			if err := json.Unmarshal(s.b[start:s.i], &v); err != nil {
				return nil, s.syntax("bad string")
			}
			return []byte(v), nil
		case c == '\\':
			escaped = true
			if err := s.escape(); err != nil {
				return nil, err
			}
		default:
			return nil, s.syntax("control character in a string")
		}
	}
}

func (s *jsonScanner) escape() error {
	s.i++ // backslash
	if s.i >= len(s.b) {
		return s.syntax("unterminated escape")
	}
	switch s.b[s.i] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		s.i++
		return nil
	case 'u':
		if s.i+5 > len(s.b) {
			return s.syntax("short \\u escape")
		}
		for _, h := range s.b[s.i+1 : s.i+5] {
			if !(h >= '0' && h <= '9' || h >= 'a' && h <= 'f' || h >= 'A' && h <= 'F') {
				return s.syntax("bad \\u escape")
			}
		}
		s.i += 5
		return nil
	}
	return s.syntax("bad escape")
}

// number scans -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? and says
// whether it has a fraction or an exponent.
func (s *jsonScanner) number() (start int, fraction bool, err error) {
	start = s.i
	if s.b[s.i] == '-' {
		s.i++
	}
	switch {
	case s.i < len(s.b) && s.b[s.i] == '0':
		s.i++
	case s.digits() == 0:
		return start, false, s.syntax("bad number")
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		fraction = true
		if s.digits() == 0 {
			return start, false, s.syntax("bad number")
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		fraction = true
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		expStart := s.i
		if s.digits() == 0 {
			return start, false, s.syntax("bad number")
		}
		if exp, err := strconv.Atoi(string(s.b[expStart:s.i])); err != nil || exp > maxExponent {
			return start, false, s.syntax(fmt.Sprintf("number with an exponent beyond ±%d", maxExponent))
		}
	}
	return start, fraction, nil
}

func (s *jsonScanner) digits() int {
	n := 0
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.i++
		n++
	}
	return n
}

// isIntegral says whether a number token has no fractional part, exactly
// (1.0 and 1e2 have none, 1.5 and 15e-1 have one), without computing its
// value: an exponent of a billion must not cost a billion digits.
func isIntegral(token []byte, fraction bool) bool {
	if !fraction {
		return true
	}
	t := strings.TrimPrefix(string(token), "-")
	mantissa, exp := t, 0
	if i := strings.IndexAny(t, "eE"); i >= 0 {
		mantissa = t[:i]
		e, err := strconv.Atoi(strings.TrimPrefix(t[i+1:], "+"))
		switch {
		case err == nil:
			exp = e
		case t[i+1] == '-':
			exp = -len(t) - 1 // shifts every digit below the point
		default:
			exp = len(t) + 1 // shifts every digit above it
		}
	}
	intPart, fracPart, _ := strings.Cut(mantissa, ".")
	digits := intPart + fracPart
	point := len(intPart) + exp // digits at and after this index are fractional
	if point < 0 {
		point = 0
	}
	if point >= len(digits) {
		return true
	}
	return strings.Trim(digits[point:], "0") == ""
}
