package tiering

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync"

	"orderlog/schema"
)

// SchemaResolver tells the worker which version of a topic's schema a
// message's schema id is (a row's schema_version), and that version's
// schema (its _schemas/ object). A topic's schemas are the versions of the
// registry subject named like the topic (docs/schemas.md).
type SchemaResolver interface {
	// VersionOf returns which version of the subject named topic has
	// schema id id: Version 0 when none has, as of revision AsOf, which
	// is at least fresh (a remembered "none" read before fresh is read
	// again; math.MaxInt64 always reads).
	VersionOf(ctx context.Context, topic string, id uint32, fresh int64) (schema.IDVersion, error)
	// Schema returns version of the subject named topic.
	Schema(ctx context.Context, topic string, version int) (schema.Version, error)
}

// NewSchemaResolver resolves over reg, remembering its answers: a version
// found, and every schema, forever (versions are immutable and never
// deleted); a "none" with the revision it was read at, since the id may be
// registered under the topic's subject later.
func NewSchemaResolver(reg *schema.Registry) SchemaResolver {
	return &registryResolver{reg: reg, found: map[topicID]schema.IDVersion{}, none: map[topicID]int64{},
		schemas: map[topicVersion]schema.Version{}}
}

type topicID struct {
	topic string
	id    uint32
}

type topicVersion struct {
	topic   string
	version int
}

// maxRemembered bounds each of the resolver's maps; a full map is
// emptied (answers are read again).
const maxRemembered = 1 << 16

type registryResolver struct {
	reg *schema.Registry
	mu  sync.Mutex
	// found holds versions found; none the revision a "none" was read at.
	found   map[topicID]schema.IDVersion
	none    map[topicID]int64
	schemas map[topicVersion]schema.Version
}

func (r *registryResolver) VersionOf(ctx context.Context, topic string, id uint32, fresh int64) (schema.IDVersion, error) {
	k := topicID{topic, id}
	r.mu.Lock()
	v, found := r.found[k]
	asOf, none := r.none[k]
	r.mu.Unlock()
	switch {
	case found:
		return v, nil
	case none && asOf >= fresh:
		return schema.IDVersion{AsOf: asOf}, nil
	}
	v, err := r.reg.VersionOfID(ctx, topic, int64(id))
	if err != nil {
		return schema.IDVersion{}, fmt.Errorf("schema id %d of topic %q: %w", id, topic, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if v.Version != 0 {
		remember(r.found, k, v)
		delete(r.none, k)
	} else {
		remember(r.none, k, v.AsOf)
	}
	return v, nil
}

func (r *registryResolver) Schema(ctx context.Context, topic string, version int) (schema.Version, error) {
	k := topicVersion{topic, version}
	r.mu.Lock()
	s, ok := r.schemas[k]
	r.mu.Unlock()
	if ok {
		return s, nil
	}
	s, err := r.reg.Get(ctx, topic, version)
	if err != nil {
		return schema.Version{}, fmt.Errorf("schema %q version %d: %w", topic, version, err)
	}
	r.mu.Lock()
	remember(r.schemas, k, s)
	r.mu.Unlock()
	return s, nil
}

func remember[K comparable, V any](m map[K]V, k K, v V) {
	if len(m) >= maxRemembered {
		clear(m)
	}
	m[k] = v
}

// SchemaObjectKey is the key, under the archive's prefix, of the schema
// object of a topic's version: _schemas/<topic>/<version>.json, the topic
// path-escaped (url.PathEscape, as the registry escapes subjects in etcd)
// and a leading "." as %2E, so that no key segment is "." or "..".
func SchemaObjectKey(topic string, version int) string {
	dir := url.PathEscape(topic)
	if strings.HasPrefix(dir, ".") {
		dir = "%2E" + dir[1:]
	}
	return fmt.Sprintf("_schemas/%s/%d.json", dir, version)
}
