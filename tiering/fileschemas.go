package tiering

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"

	"orderlog/schema"
	"orderlog/tiering/objstore"
)

// fileSchemas resolves the schema_version of one file's rows, and
// collects the (topic, version) pairs they name.
//
// The rule: a row's schema_version is the version of the subject named
// like its topic with the row's schema id, if that version was registered
// at an etcd revision below `before`, the revision of the file's plan;
// else null. Versions are immutable and never deleted, so under a fixed
// `before` every resolution, by any worker at any time, is the same: a
// successor that builds a recorded plan's file again writes the same rows
// and digest, and finds an earlier attempt's object equal.
//
// A new file is built before its plan exists, so its rows resolve against
// the registry as it stands (before = unbounded): a version found was
// registered before the plan; an id found in no version ("none") may get
// one before the plan is recorded. settle checks those once the plan's
// revision is known; if one did, the file is built again from the plan.
type fileSchemas struct {
	resolver SchemaResolver
	before   int64
	answers  map[topicID]schema.IDVersion
	named    map[topicVersion]bool
}

// unbounded is the `before` of a file whose plan is not recorded yet.
const unbounded = math.MaxInt64

// newFileSchemas resolves under before (unbounded for a new file); with a
// nil resolver every schema_version is null.
func newFileSchemas(resolver SchemaResolver, before int64) *fileSchemas {
	return &fileSchemas{resolver: resolver, before: before, answers: map[topicID]schema.IDVersion{}, named: map[topicVersion]bool{}}
}

// version is the schema_version of a row of topic with schema id id (0:
// null).
func (s *fileSchemas) version(ctx context.Context, topic string, id uint32) (int32, error) {
	if s == nil || s.resolver == nil || id == 0 {
		return 0, nil
	}
	k := topicID{topic, id}
	a, ok := s.answers[k]
	if !ok {
		var err error
		if a, err = s.resolver.VersionOf(ctx, topic, id, s.fresh()); err != nil {
			return 0, err
		}
		s.answers[k] = a
	}
	if a.Version <= 0 || a.Version > math.MaxInt32 || a.Registered >= s.before {
		return 0, nil
	}
	s.named[topicVersion{topic, a.Version}] = true
	return int32(a.Version), nil
}

// fresh is how recent a "none" must be: one read at before-1 or later
// holds under the rule; a new file reads each id's answer afresh.
func (s *fileSchemas) fresh() int64 {
	if s.before == unbounded {
		return unbounded
	}
	return s.before - 1
}

// settle fixes the rule of a new file at before (its plan's revision) and
// reports whether its rows follow it. The versions found were read, so
// registered, before the plan; an id left null must still have no version
// registered below before.
func (s *fileSchemas) settle(ctx context.Context, before int64) (bool, error) {
	if s == nil || s.resolver == nil {
		return true, nil
	}
	s.before = before
	for k, a := range s.answers {
		if a.Version != 0 || a.AsOf >= before-1 {
			continue
		}
		now, err := s.resolver.VersionOf(ctx, k.topic, k.id, before-1)
		if err != nil {
			return false, err
		}
		if now.Version != 0 && now.Registered < before {
			return false, nil
		}
	}
	return true, nil
}

// schemaObject is the JSON of a _schemas/ object, the fields of the
// Confluent Schema Registry's GET /subjects/{subject}/versions/{version}
// answer (schemaType always present).
type schemaObject struct {
	Subject    string `json:"subject"`
	Version    int    `json:"version"`
	ID         int64  `json:"id"`
	SchemaType string `json:"schemaType"`
	Schema     string `json:"schema"`
}

func encodeSchemaObject(v schema.Version) ([]byte, error) {
	b, err := json.Marshal(schemaObject{Subject: v.Subject, Version: v.Version, ID: v.ID, SchemaType: string(v.Format), Schema: v.Text})
	return append(b, '\n'), err
}

// putSchemas writes the schema object of every (topic, version) the
// file's rows name that this worker has not written yet (written holds
// those). One already there must hold the same schema (an earlier
// attempt's, or another file's); anything else is ErrConflict.
func putSchemas(ctx context.Context, store objstore.Store, prefix string, s *fileSchemas, written map[topicVersion]bool) error {
	if s == nil {
		return nil
	}
	pairs := make([]topicVersion, 0, len(s.named))
	for tv := range s.named {
		if !written[tv] {
			pairs = append(pairs, tv)
		}
	}
	slices.SortFunc(pairs, func(a, b topicVersion) int {
		return cmp.Or(cmp.Compare(a.topic, b.topic), cmp.Compare(a.version, b.version))
	})
	for _, tv := range pairs {
		if err := putSchema(ctx, store, prefix, s.resolver, tv); err != nil {
			return err
		}
		written[tv] = true
	}
	return nil
}

func putSchema(ctx context.Context, store objstore.Store, prefix string, resolver SchemaResolver, tv topicVersion) error {
	v, err := resolver.Schema(ctx, tv.topic, tv.version)
	if err != nil {
		return err
	}
	body, err := encodeSchemaObject(v)
	if err != nil {
		return err
	}
	key := joinKey(prefix, SchemaObjectKey(tv.topic, tv.version))
	err = store.PutIfAbsent(ctx, key, bytes.NewReader(body), int64(len(body)))
	if !errors.Is(err, objstore.ErrExists) {
		return err
	}
	raw, err := store.Get(ctx, key)
	if err != nil {
		return err
	}
	var there, mine schemaObject
	if err := json.Unmarshal(raw, &there); err != nil || json.Unmarshal(body, &mine) != nil || there != mine {
		return fmt.Errorf("%w: %s holds %q, the registry's schema is %q", ErrConflict, key, raw, body)
	}
	return nil
}
