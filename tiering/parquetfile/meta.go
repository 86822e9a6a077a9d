package parquetfile

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Range is the half-open offset range [First, End).
type Range struct{ First, End uint64 }

// Len is the number of offsets in the range.
func (r Range) Len() uint64 { return r.End - r.First }

// Meta is what an archive file's footer says about it.
type Meta struct {
	// FormatVersion is orderlog.format_version: 2 for the files this
	// package writes, 1 for files written before (no schema_id column).
	FormatVersion int
	// First and End bound the file's offset range [First, End).
	First, End uint64
	// Holes are the offsets of [First, End) without a row, as maximal runs,
	// sorted; nil when every offset has a row.
	Holes []Range
	// Rows is the number of rows (messages): End - First - the holes' lengths.
	Rows int64
	// Digest is "sha256:" + the hex SHA-256 of the rows' canonical encoding
	// (see digest.go).
	Digest string
}

// Footer key-values of an archive file (docs/format/archive.md). All values
// are strings; numbers are unsigned decimal without sign or leading zeros.
const (
	keyFormatVersion = "orderlog.format_version"
	keyFirst         = "orderlog.first"
	keyEnd           = "orderlog.end"
	keyHoles         = "orderlog.holes"
	keyRows          = "orderlog.rows"
	keyDigest        = "orderlog.digest"

	// formatVersion is the orderlog.format_version this package writes;
	// it reads it and formatVersion1 (no schema_id column, every
	// schema_version null).
	formatVersion  = "2"
	formatVersion1 = "1"
	digestPrefix   = "sha256:"
)

// footerKeys lists the footer keys in the order the writer appends them.
var footerKeys = []string{keyFormatVersion, keyFirst, keyEnd, keyHoles, keyRows, keyDigest}

// footerValues renders m as the footer key-values, in footerKeys order.
func footerValues(m Meta) []string {
	return []string{
		strconv.Itoa(m.FormatVersion),
		strconv.FormatUint(m.First, 10),
		strconv.FormatUint(m.End, 10),
		encodeHoles(m.Holes),
		strconv.FormatInt(m.Rows, 10),
		m.Digest,
	}
}

// encodeHoles renders holes as the orderlog.holes value: a JSON array of
// [first,end] pairs, "[]" when there are none, no spaces: [[3,5],[9,10]].
func encodeHoles(holes []Range) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, h := range holes {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "[%d,%d]", h.First, h.End)
	}
	b.WriteByte(']')
	return b.String()
}

// decodeHoles parses an orderlog.holes value and checks it describes holes
// of [first, end): pairs with first < end, sorted, not touching (maximal
// runs), inside the range. It returns nil for "[]".
func decodeHoles(s string, first, end uint64) ([]Range, error) {
	dec := json.NewDecoder(strings.NewReader(s))
	var pairs [][]uint64
	if err := dec.Decode(&pairs); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrCorrupt, keyHoles, err)
	}
	if dec.More() || pairs == nil {
		return nil, fmt.Errorf("%w: %s is not one JSON array", ErrCorrupt, keyHoles)
	}
	var holes []Range
	prevEnd := first
	for i, p := range pairs {
		if len(p) != 2 {
			return nil, fmt.Errorf("%w: %s[%d] has %d numbers, want 2", ErrCorrupt, keyHoles, i, len(p))
		}
		h := Range{First: p[0], End: p[1]}
		if h.First >= h.End || h.First < prevEnd || h.End > end || (i > 0 && h.First == prevEnd) {
			return nil, fmt.Errorf("%w: %s[%d] = [%d,%d) is empty, unsorted, touching or outside [%d,%d)",
				ErrCorrupt, keyHoles, i, h.First, h.End, first, end)
		}
		holes = append(holes, h)
		prevEnd = h.End
	}
	if encodeHoles(holes) != s {
		// Numbers such as 1e3 or 007, or spaces: not the canonical form.
		return nil, fmt.Errorf("%w: %s is not in canonical form", ErrCorrupt, keyHoles)
	}
	return holes, nil
}

// decodeMeta parses the orderlog.* footer key-values (get returns a key's
// value and whether it is present). It checks each value's form and the
// holes against the range, and that rows + holes = end - first; it does not
// look at the file (Open does).
func decodeMeta(get func(string) (string, bool)) (Meta, error) {
	present := 0
	for _, k := range footerKeys {
		if _, ok := get(k); ok {
			present++
		}
	}
	if present == 0 {
		return Meta{}, ErrNotArchive
	}
	var m Meta
	switch v, _ := get(keyFormatVersion); v {
	case formatVersion1:
		m.FormatVersion = 1
	case formatVersion:
		m.FormatVersion = 2
	default:
		return Meta{}, fmt.Errorf("%w: %s=%q", ErrUnsupportedVersion, keyFormatVersion, v)
	}
	if present != len(footerKeys) {
		return Meta{}, fmt.Errorf("%w: %d of the %d orderlog.* footer keys", ErrCorrupt, present, len(footerKeys))
	}
	var err error
	if m.First, err = decimal(get, keyFirst); err != nil {
		return Meta{}, err
	}
	if m.End, err = decimal(get, keyEnd); err != nil {
		return Meta{}, err
	}
	if m.First >= m.End || m.End > math.MaxInt64 {
		return Meta{}, fmt.Errorf("%w: range [%d,%d)", ErrCorrupt, m.First, m.End)
	}
	holesText, _ := get(keyHoles)
	if m.Holes, err = decodeHoles(holesText, m.First, m.End); err != nil {
		return Meta{}, err
	}
	rows, err := decimal(get, keyRows)
	if err != nil {
		return Meta{}, err
	}
	if rows != m.End-m.First-holeLen(m.Holes) {
		return Meta{}, fmt.Errorf("%w: %s=%d, but the range and holes leave %d", ErrCorrupt, keyRows, rows, m.End-m.First-holeLen(m.Holes))
	}
	m.Rows = int64(rows)
	m.Digest, _ = get(keyDigest)
	if !validDigest(m.Digest) {
		return Meta{}, fmt.Errorf("%w: %s=%q", ErrCorrupt, keyDigest, m.Digest)
	}
	return m, nil
}

// decimal parses key's value as a canonical unsigned decimal.
func decimal(get func(string) (string, bool), key string) (uint64, error) {
	s, _ := get(key)
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil || strconv.FormatUint(v, 10) != s {
		return 0, fmt.Errorf("%w: %s=%q is not a decimal", ErrCorrupt, key, s)
	}
	return v, nil
}

// validDigest reports whether d is "sha256:" and 64 lower-case hex digits.
func validDigest(d string) bool {
	hex, ok := strings.CutPrefix(d, digestPrefix)
	if !ok || len(hex) != 64 {
		return false
	}
	return bytes.IndexFunc([]byte(hex), func(r rune) bool {
		return !('0' <= r && r <= '9' || 'a' <= r && r <= 'f')
	}) < 0
}

// holeLen is the number of offsets in holes.
func holeLen(holes []Range) uint64 {
	var n uint64
	for _, h := range holes {
		n += h.Len()
	}
	return n
}
