package producewire

import (
	"errors"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
)

var (
	// ErrMalformed: the bytes are not a valid protobuf encoding.
	ErrMalformed = errors.New("producewire: malformed protobuf")
	// ErrInvalidUTF8: a string field holds bytes that are not UTF-8
	// (protobuf strings must be).
	ErrInvalidUTF8 = errors.New("producewire: string field contains invalid UTF-8")
)

// eachField calls field for every field of the message in b: v is a
// length-delimited value, x a varint. field reports whether it knew the
// field; an unknown one (or a known number with another wire type, as
// proto.Unmarshal treats it) is skipped.
func eachField(b []byte, field func(num protowire.Number, typ protowire.Type, v []byte, x uint64) (bool, error)) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || num > protowire.MaxValidNumber {
			return ErrMalformed
		}
		b = b[n:]
		var v []byte
		var x uint64
		switch typ {
		case protowire.VarintType:
			x, n = protowire.ConsumeVarint(b)
		case protowire.BytesType:
			v, n = protowire.ConsumeBytes(b)
		default:
			n = -1
		}
		if n >= 0 {
			known, err := field(num, typ, v, x)
			if err != nil {
				return err
			}
			if known {
				b = b[n:]
				continue
			}
		}
		if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
			return ErrMalformed
		}
		b = b[n:]
	}
	return nil
}

// countFields counts the length-delimited fields numbered num in b, to
// size a slab; on malformed input it returns what it counted so far (the
// decoding pass reports the error).
func countFields(b []byte, num protowire.Number) int {
	n := 0
	_ = eachField(b, func(got protowire.Number, typ protowire.Type, _ []byte, _ uint64) (bool, error) {
		if got == num && typ == protowire.BytesType {
			n++
		}
		return false, nil // counted only: eachField skips it
	})
	return n
}

// take returns the next element of a slab sized by countFields, or a new
// one when the slab is used up.
func take[T any](slab *[]T) *T {
	if len(*slab) == 0 {
		return new(T)
	}
	v := &(*slab)[0]
	*slab = (*slab)[1:]
	return v
}

func utf8String(v []byte) (string, error) {
	if !utf8.Valid(v) {
		return "", ErrInvalidUTF8
	}
	return string(v), nil
}

// alias returns v capped at its length (an append never writes into the
// rest of the buffer), nil when empty as proto.Unmarshal leaves it.
func alias(v []byte) []byte {
	if len(v) == 0 {
		return nil
	}
	return v[:len(v):len(v)]
}

// Encoding helpers for proto3 fields: each appends nothing for a zero value.

func appendVarintField(b []byte, num protowire.Number, x uint64) []byte {
	if x == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, x)
}

func appendBoolField(b []byte, num protowire.Number, x bool) []byte {
	if !x {
		return b
	}
	return appendVarintField(b, num, 1)
}

func appendBytesField(b []byte, num protowire.Number, v []byte) []byte {
	if len(v) == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

func appendStringField(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

// appendLength starts a length-delimited field of n bytes.
func appendLength(b []byte, num protowire.Number, n int) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendVarint(b, uint64(n))
}

// The sizes of what the helpers above append (all field numbers here are
// below 16, so every tag is one byte).

func varintFieldSize(x uint64) int {
	if x == 0 {
		return 0
	}
	return 1 + protowire.SizeVarint(x)
}

func boolFieldSize(x bool) int {
	if !x {
		return 0
	}
	return 2
}

func bytesFieldSize(n int) int {
	if n == 0 {
		return 0
	}
	return lengthFieldSize(n)
}

func lengthFieldSize(n int) int { return 1 + protowire.SizeBytes(n) }

func validString(s string) error {
	if !utf8.ValidString(s) {
		return ErrInvalidUTF8
	}
	return nil
}
