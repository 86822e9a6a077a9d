package schema

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	clientv3 "go.etcd.io/etcd/client/v3"

	"orderlog/internal/apierr"
)

// Version is one immutable version of a subject.
type Version struct {
	Subject string
	Version int   // 1..n within the subject
	ID      int64 // global schema id
	Format  Format
	Text    string
}

// Latest names a subject's newest version where a version is asked for.
const Latest = -1

// maxAttempts bounds how often a registration re-reads and retries when
// another one committed in between.
const maxAttempts = 16

// MaxSubjectBytes bounds a subject name.
const MaxSubjectBytes = 255

// Registry is the schema registry, kept in etcd. It holds no state of its
// own: several nodes may serve one registry.
type Registry struct{ store store }

// New returns a Registry over etcd.
func New(etcd *clientv3.Client) *Registry { return &Registry{store: store{etcd: etcd}} }

// Register adds format/text as the next version of subject, checked
// against the subject's compatibility level, and returns it. The same
// schema registered again returns the version it already has.
func (r *Registry) Register(ctx context.Context, subject string, format Format, text string) (Version, error) {
	if err := validSubject(subject); err != nil {
		return Version{}, err
	}
	candidate, err := Parse(format, text)
	if err != nil {
		return Version{}, err
	}
	fp := fingerprint(format, text)
	for range maxAttempts {
		st, err := r.store.readSubject(ctx, subject, fp)
		if err != nil {
			return Version{}, err
		}
		p, err := planRegister(st, candidate, fp)
		if err != nil {
			return Version{}, apiError(err)
		}
		p.version.Subject = subject
		if p.existing {
			return p.version, nil
		}
		ok, err := r.store.commit(ctx, subject, st, p)
		if err != nil || ok {
			return p.version, err
		}
	}
	return Version{}, apierr.New(apierr.Unavailable, "subject %q: registration kept conflicting with others; retry", subject)
}

// Lookup finds the version of subject with the same format and text.
func (r *Registry) Lookup(ctx context.Context, subject string, format Format, text string) (Version, error) {
	if _, err := Parse(format, text); err != nil {
		return Version{}, err
	}
	versions, err := r.existingVersions(ctx, subject)
	if err != nil {
		return Version{}, err
	}
	fp := fingerprint(format, text)
	for _, v := range versions {
		if fingerprint(v.Format, v.Text) == fp {
			return v, nil
		}
	}
	return Version{}, apierr.New(apierr.UnknownSchema, "schema not found under subject %q", subject)
}

// Subjects lists the subjects, sorted.
func (r *Registry) Subjects(ctx context.Context) ([]string, error) { return r.store.subjects(ctx) }

// Versions lists a subject's versions, oldest first.
func (r *Registry) Versions(ctx context.Context, subject string) ([]Version, error) {
	return r.existingVersions(ctx, subject)
}

// Get returns one version of subject; version may be Latest.
func (r *Registry) Get(ctx context.Context, subject string, version int) (Version, error) {
	versions, err := r.existingVersions(ctx, subject)
	if err != nil {
		return Version{}, err
	}
	if version == Latest {
		return versions[len(versions)-1], nil
	}
	if version < 1 || version > len(versions) {
		return Version{}, apierr.New(apierr.UnknownSchemaVersion, "subject %q has no version %d", subject, version)
	}
	return versions[version-1], nil
}

// ByID returns the schema with a global id (Subject and Version unset).
func (r *Registry) ByID(ctx context.Context, id int64) (Version, error) {
	rec, found, err := r.store.schema(ctx, id)
	if err != nil {
		return Version{}, err
	}
	if !found {
		return Version{}, apierr.New(apierr.UnknownSchema, "no schema with id %d", id)
	}
	return Version{ID: rec.ID, Format: rec.Format, Text: rec.Text}, nil
}

// CheckCompatibility says whether format/text could be registered under
// subject as the level stands: against version (or Latest) alone, or, with
// version 0, against every version the level looks at. nil: compatible;
// an *IncompatibleError (inside INCOMPATIBLE_SCHEMA): not.
func (r *Registry) CheckCompatibility(ctx context.Context, subject string, version int, format Format, text string) error {
	candidate, err := Parse(format, text)
	if err != nil {
		return err
	}
	versions, err := r.existingVersions(ctx, subject)
	if err != nil {
		return err
	}
	level, err := r.store.effectiveLevel(ctx, subject)
	if err != nil {
		return err
	}
	if version == 0 {
		previous, err := parseAll(versions)
		if err != nil {
			return err
		}
		return apiError(Check(level, candidate, previous))
	}
	v, err := r.Get(ctx, subject, version)
	if err != nil {
		return err
	}
	existing, err := Parse(v.Format, v.Text)
	if err != nil {
		return err
	}
	return apiError(checkPair(level, candidate, existing, v.Version))
}

// Level returns subject's own level ("" if it has none; subject "" asks
// for the global level, DefaultLevel until set).
func (r *Registry) Level(ctx context.Context, subject string) (Level, error) {
	if subject == "" {
		level, err := r.store.level(ctx, globalLevelKey)
		if level == "" && err == nil {
			level = DefaultLevel
		}
		return level, err
	}
	return r.store.level(ctx, levelKey(subject))
}

// SetLevel sets subject's level, or with subject "" the global one.
func (r *Registry) SetLevel(ctx context.Context, subject string, level Level) error {
	if _, err := ParseLevel(string(level)); err != nil {
		return err
	}
	key := globalLevelKey
	if subject != "" {
		if err := validSubject(subject); err != nil {
			return err
		}
		key = levelKey(subject)
	}
	_, err := r.store.etcd.Put(ctx, key, string(level))
	return err
}

func (r *Registry) existingVersions(ctx context.Context, subject string) ([]Version, error) {
	versions, err := r.store.versions(ctx, subject)
	if err != nil {
		return nil, err
	}
	if len(versions) == 0 {
		return nil, apierr.New(apierr.UnknownSubject, "subject %q not found", subject)
	}
	return versions, nil
}

// parseAll parses stored versions (they parsed when registered).
func parseAll(versions []Version) ([]*Parsed, error) {
	out := make([]*Parsed, len(versions))
	for i, v := range versions {
		p, err := Parse(v.Format, v.Text)
		if err != nil {
			return nil, fmt.Errorf("stored version %d of %q: %w", v.Version, v.Subject, err)
		}
		out[i] = p
	}
	return out, nil
}

func validSubject(subject string) error {
	if subject == "" || len(subject) > MaxSubjectBytes {
		return apierr.New(apierr.InvalidArgument, "subject: 1-%d bytes", MaxSubjectBytes)
	}
	for _, c := range subject {
		if c < 0x20 || c == 0x7f {
			return apierr.New(apierr.InvalidArgument, "subject %s: control characters", strconv.Quote(subject))
		}
	}
	return nil
}

// apiError turns an *IncompatibleError into INCOMPATIBLE_SCHEMA, keeping
// it in the chain.
func apiError(err error) error {
	var incompatible *IncompatibleError
	if errors.As(err, &incompatible) {
		return refusal{api: incompatible.apiError(), cause: incompatible}
	}
	return err
}

// refusal is an INCOMPATIBLE_SCHEMA error that still unwraps to the
// *IncompatibleError it came from.
type refusal struct {
	api   *apierr.Error
	cause *IncompatibleError
}

func (r refusal) Error() string   { return r.api.Error() }
func (r refusal) Unwrap() []error { return []error{r.api, r.cause} }
