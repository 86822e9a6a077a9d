package httpapi

import (
	"strings"
	"unicode/utf8"

	"orderlog/internal/apierr"
)

// Every name a client gives that becomes part of an etcd key or value, or
// of a producer snapshot, is bounded (docs/operations.md, "Limits"); a
// longer one is refused with INVALID_ARGUMENT (HTTP 400), gRPC and HTTP
// alike. Topic names: MaxTopicNameLength (topic.go).
const (
	// MaxProducerNameBytes bounds a producer's name (its etcd record).
	MaxProducerNameBytes = 256
	// MaxGroupNameBytes bounds a consumer group's name.
	MaxGroupNameBytes = 256
	// MaxIdempotencyKeyBytes bounds an Idempotency-Key (kept in the
	// bucket's snapshots and as the message's id).
	MaxIdempotencyKeyBytes = 256
)

// ValidateProducerName accepts a producer name of 1 to MaxProducerNameBytes
// bytes of UTF-8.
func ValidateProducerName(name string) error {
	switch {
	case name == "":
		return apierr.New(apierr.InvalidArgument, "producer name is required")
	case len(name) > MaxProducerNameBytes:
		return apierr.New(apierr.InvalidArgument, "producer name of %d bytes exceeds %d", len(name), MaxProducerNameBytes)
	case !utf8.ValidString(name):
		return apierr.New(apierr.InvalidArgument, "producer name is not UTF-8")
	}
	return nil
}

// ParseIdempotencyKey reads an Idempotency-Key header value. The IETF
// draft makes it a structured-field string (RFC 8941: `"…"`, printable
// ASCII, `\"` and `\\` escaped); a bare value of printable ASCII is taken
// as it is, as before. The key is what is inside the quotes, so a retry
// may use either form. At most MaxIdempotencyKeyBytes.
func ParseIdempotencyKey(value string) (string, error) {
	key := value
	if strings.HasPrefix(value, `"`) {
		var ok bool
		if key, ok = unquoteSFString(value); !ok {
			return "", apierr.New(apierr.InvalidArgument, "Idempotency-Key %q is not a structured-field string", value)
		}
	}
	switch {
	case key == "":
		return "", apierr.New(apierr.InvalidArgument, "Idempotency-Key is empty")
	case len(key) > MaxIdempotencyKeyBytes:
		return "", apierr.New(apierr.InvalidArgument, "Idempotency-Key of %d bytes exceeds %d", len(key), MaxIdempotencyKeyBytes)
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x20 || key[i] > 0x7e {
			return "", apierr.New(apierr.InvalidArgument, "Idempotency-Key has byte 0x%02x; use printable ASCII", key[i])
		}
	}
	return key, nil
}

// unquoteSFString decodes an RFC 8941 sf-string: `"`, characters 0x20-0x7e
// with `"` and `\` escaped by `\`, `"`, nothing after.
func unquoteSFString(s string) (string, bool) {
	if len(s) < 2 || s[0] != '"' || s[len(s)-1] != '"' {
		return "", false
	}
	var b strings.Builder
	for i := 1; i < len(s)-1; i++ {
		c := s[i]
		switch {
		case c == '\\':
			i++
			if i == len(s)-1 || (s[i] != '"' && s[i] != '\\') {
				return "", false
			}
			b.WriteByte(s[i])
		case c == '"' || c < 0x20 || c > 0x7e:
			return "", false
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), true
}
