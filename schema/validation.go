package schema

import (
	"context"
	"net/url"
	"strings"

	"orderlog/internal/apierr"
	"orderlog/internal/keys"
)

// Validation is what produce does with the messages of the topic named
// like a subject (docs/schemas.md).
type Validation string

const (
	// ValidateNone logs every message as it comes (the default).
	ValidateNone Validation = "none"
	// ValidateWarn checks every message, logs it even when it does not
	// match, and counts and logs the mismatch.
	ValidateWarn Validation = "warn"
	// ValidateStrict refuses a frame with a message that names no schema
	// of the subject or does not match the one it names (SCHEMA_MISMATCH).
	ValidateStrict Validation = "strict"
)

// validationsPrefix holds validation/<escaped subject>; a subject without
// a key validates nothing.
const validationsPrefix = keys.SchemasPrefix + "validation/"

func validationKey(subject string) string { return validationsPrefix + url.PathEscape(subject) }

// ParseValidation reads a validation mode, case-insensitively.
func ParseValidation(s string) (Validation, error) {
	switch v := Validation(strings.ToLower(s)); v {
	case ValidateNone, ValidateWarn, ValidateStrict:
		return v, nil
	}
	return "", apierr.New(apierr.InvalidArgument, "validation %q: want none, warn or strict", s)
}

// Validation returns subject's validation mode (ValidateNone if unset).
func (r *Registry) Validation(ctx context.Context, subject string) (Validation, error) {
	resp, err := r.store.etcd.Get(ctx, validationKey(subject))
	if err != nil || len(resp.Kvs) == 0 {
		return ValidateNone, err
	}
	return ParseValidation(string(resp.Kvs[0].Value))
}

// SetValidation sets what produce checks of the topic named subject.
// Every node applies it within its watch's delay.
func (r *Registry) SetValidation(ctx context.Context, subject string, v Validation) error {
	if _, err := ParseValidation(string(v)); err != nil {
		return err
	}
	if err := validSubject(subject); err != nil {
		return err
	}
	_, err := r.store.etcd.Put(ctx, validationKey(subject), string(v))
	return err
}
