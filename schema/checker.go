package schema

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"orderlog/internal/apierr"
	"orderlog/internal/keys"
)

// Checker answers, on the produce path, whether a message matches its
// topic's schema (docs/schemas.md, "Validation on produce"). It follows
// the registry's validation modes and subject versions through an etcd
// watch, so a topic that validates nothing costs one map lookup per
// message, and it compiles each schema once, on first use.
type Checker struct {
	reg    *Registry
	logger *slog.Logger

	mu    sync.Mutex // serializes writers of state
	state atomic.Pointer[checkState]

	validators sync.Map // uint32 schema id → payloadValidator

	missMu sync.Mutex
	misses map[missKey]time.Time // (subject, id) not found, and when
	// downUntil (unix nanoseconds): an etcd read failed; until then the
	// produce path answers UNAVAILABLE at once rather than wait again.
	downUntil atomic.Int64
}

// checkState is immutable once published; writers copy it.
type checkState struct {
	modes    map[string]Validation     // subject → mode; absent: none
	versions map[string]map[uint32]int // subject → schema id → version
}

type missKey struct {
	subject string
	id      uint32
}

// missTTL bounds how often a message naming a schema id its topic does not
// have reads etcd: the watch may lag a registration by a moment, so a miss
// is asked of etcd itself, but not more than once per TTL.
const missTTL = time.Second

// lookupTimeout bounds an etcd read on the produce path.
const lookupTimeout = 2 * time.Second

// downFor is how long a failed etcd read is remembered: frames of a
// validated topic wait for etcd at most once per this.
const downFor = time.Second

// read runs an etcd read of the produce path, unless one failed within
// downFor: then it answers UNAVAILABLE without trying.
func (c *Checker) read(ctx context.Context, fn func(context.Context) error) error {
	if time.Now().UnixNano() < c.downUntil.Load() {
		return apierr.New(apierr.Unavailable, "schema registry: etcd unreachable; retry")
	}
	ctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	defer cancel()
	err := fn(ctx)
	if err != nil && apierr.As(err).Code == apierr.Internal {
		c.downUntil.Store(time.Now().Add(downFor).UnixNano())
	}
	return unavailable(err)
}

// MismatchError is a message that does not match its topic's schema.
type MismatchError struct{ Reason string }

func (e *MismatchError) Error() string { return e.Reason }

// NewChecker reads the registry's modes and versions and follows them
// until ctx ends.
func NewChecker(ctx context.Context, etcd *clientv3.Client, logger *slog.Logger) (*Checker, error) {
	c := &Checker{reg: New(etcd), logger: logger, misses: map[missKey]time.Time{}}
	rev, err := c.load(ctx)
	if err != nil {
		return nil, err
	}
	go c.follow(ctx, rev)
	return c, nil
}

// Check says what the topic's validation makes of a message: its mode,
// and a *MismatchError when the value does not match (or names no schema
// of the topic). Other errors (the registry unreachable) are apierr ones.
func (c *Checker) Check(topic string, id uint32, value []byte) (Validation, error) {
	st := c.state.Load()
	mode, ok := st.modes[topic]
	if !ok || mode == ValidateNone {
		return ValidateNone, nil
	}
	if id == 0 {
		return mode, &MismatchError{fmt.Sprintf("topic %q requires a schema id; the message names none", topic)}
	}
	version, ok := st.versions[topic][id]
	if !ok {
		var err error
		if version, ok, err = c.lookup(topic, id); err != nil {
			return mode, err
		}
		if !ok {
			return mode, &MismatchError{fmt.Sprintf("schema id %d is not a version of subject %q", id, topic)}
		}
	}
	v, err := c.validator(id)
	if err != nil {
		return mode, err
	}
	if err := v.validate(value); err != nil {
		return mode, &MismatchError{fmt.Sprintf("does not match schema id %d (%q version %d): %v", id, topic, version, err)}
	}
	return mode, nil
}

func (c *Checker) validator(id uint32) (payloadValidator, error) {
	if v, ok := c.validators.Load(id); ok {
		return v.(payloadValidator), nil
	}
	var sch Version
	if err := c.read(context.Background(), func(ctx context.Context) (err error) {
		sch, err = c.reg.ByID(ctx, int64(id))
		return err
	}); err != nil {
		return nil, err
	}
	p, err := Parse(sch.Format, sch.Text)
	if err != nil {
		return nil, err
	}
	v, err := newPayloadValidator(p)
	if err != nil {
		return nil, err
	}
	c.validators.Store(id, v)
	return v, nil
}

// lookup asks etcd whether id is a version of subject, at most once per
// missTTL for a (subject, id) that is not.
func (c *Checker) lookup(subject string, id uint32) (int, bool, error) {
	key := missKey{subject, id}
	c.missMu.Lock()
	at, missed := c.misses[key]
	c.missMu.Unlock()
	if missed && time.Since(at) < missTTL {
		return 0, false, nil
	}
	var resp *clientv3.GetResponse
	if err := c.read(context.Background(), func(ctx context.Context) (err error) {
		resp, err = c.reg.store.etcd.Get(ctx, versionsOf(subject), clientv3.WithPrefix())
		return err
	}); err != nil {
		return 0, false, err
	}
	for _, kv := range resp.Kvs {
		if rec, ok := decodeVersionRecord(kv.Value); ok && rec.ID == int64(id) {
			c.update(func(st *checkState) { st.addVersion(subject, id, rec.Version) })
			return rec.Version, true, nil
		}
	}
	c.missMu.Lock()
	if len(c.misses) > 10000 { // ids a client made up: forget them wholesale
		clear(c.misses)
	}
	c.misses[key] = time.Now()
	c.missMu.Unlock()
	return 0, false, nil
}

func unavailable(err error) error {
	if err == nil || apierr.As(err).Code != apierr.Internal {
		return err
	}
	return apierr.New(apierr.Unavailable, "schema registry: %v", err)
}

// load reads every mode and version at one revision and publishes them.
func (c *Checker) load(ctx context.Context) (int64, error) {
	resp, err := c.reg.store.etcd.Txn(ctx).Then(
		clientv3.OpGet(validationsPrefix, clientv3.WithPrefix()),
		clientv3.OpGet(versionsPrefix, clientv3.WithPrefix()),
	).Commit()
	if err != nil {
		return 0, fmt.Errorf("schema: load validation modes: %w", err)
	}
	st := &checkState{modes: map[string]Validation{}, versions: map[string]map[uint32]int{}}
	for _, r := range resp.Responses {
		for _, kv := range r.GetResponseRange().Kvs {
			st.apply(string(kv.Key), kv.Value, false)
		}
	}
	c.mu.Lock()
	c.state.Store(st)
	c.mu.Unlock()
	return resp.Header.Revision, nil
}

// follow applies the registry's changes after rev; when the watch fails
// (etcd compacted past it, say) it loads everything again.
func (c *Checker) follow(ctx context.Context, rev int64) {
	for ctx.Err() == nil {
		watch := c.reg.store.etcd.Watch(clientv3.WithRequireLeader(ctx), keys.SchemasPrefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1))
		for resp := range watch {
			if err := resp.Err(); err != nil {
				c.logger.Warn("schema: validation watch failed; reloading", "err", err)
				break
			}
			c.update(func(st *checkState) {
				for _, ev := range resp.Events {
					st.apply(string(ev.Kv.Key), ev.Kv.Value, ev.Type == clientv3.EventTypeDelete)
				}
			})
			rev = resp.Header.Revision
		}
		for ctx.Err() == nil {
			r, err := c.load(ctx)
			if err == nil {
				rev = r
				break
			}
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}

// update publishes a copy of the state changed by fn.
func (c *Checker) update(fn func(*checkState)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.state.Load()
	st := &checkState{modes: maps.Clone(old.modes), versions: maps.Clone(old.versions)}
	fn(st)
	c.state.Store(st)
}

// apply records one registry key; others are ignored.
func (st *checkState) apply(key string, value []byte, deleted bool) {
	switch {
	case strings.HasPrefix(key, validationsPrefix):
		subject, err := url.PathUnescape(strings.TrimPrefix(key, validationsPrefix))
		if err != nil {
			return
		}
		mode, err := ParseValidation(string(value))
		if deleted || err != nil {
			mode = ValidateNone
		}
		st.modes[subject] = mode
	case strings.HasPrefix(key, versionsPrefix) && !deleted:
		escaped, _, ok := strings.Cut(strings.TrimPrefix(key, versionsPrefix), "/")
		subject, err := url.PathUnescape(escaped)
		rec, decoded := decodeVersionRecord(value)
		if ok && err == nil && decoded && rec.ID > 0 && rec.ID <= 1<<32-1 {
			st.addVersion(subject, uint32(rec.ID), rec.Version)
		}
	}
}

// addVersion copies the subject's map: older states may be read still.
func (st *checkState) addVersion(subject string, id uint32, version int) {
	ids := maps.Clone(st.versions[subject])
	if ids == nil {
		ids = map[uint32]int{}
	}
	ids[id] = version
	st.versions[subject] = ids
}

func decodeVersionRecord(b []byte) (versionRecord, bool) {
	var rec versionRecord
	return rec, json.Unmarshal(b, &rec) == nil
}

// VersionID resolves version (1..n) of subject to its global schema id,
// from the watched state, else from etcd.
func (c *Checker) VersionID(ctx context.Context, subject string, version int) (uint32, error) {
	for id, v := range c.state.Load().versions[subject] {
		if v == version {
			return id, nil
		}
	}
	if version < 1 {
		return 0, apierr.New(apierr.InvalidArgument, "schema version %d: versions start at 1", version)
	}
	var v Version
	if err := c.read(ctx, func(ctx context.Context) (err error) {
		v, err = c.reg.Get(ctx, subject, version)
		return err
	}); err != nil {
		return 0, err
	}
	c.update(func(st *checkState) { st.addVersion(subject, uint32(v.ID), v.Version) })
	return uint32(v.ID), nil
}
