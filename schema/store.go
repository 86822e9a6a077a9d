package schema

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"orderlog/internal/keys"
)

// The registry's keys, all under keys.SchemasPrefix (see there). Subjects
// are path-escaped, so one subject's keys are never a prefix of another's.
const (
	nextIDKey      = keys.SchemasPrefix + "next-id"
	idsPrefix      = keys.SchemasPrefix + "ids/"
	hashesPrefix   = keys.SchemasPrefix + "hashes/"
	subjectsPrefix = keys.SchemasPrefix + "subjects/"
	versionsPrefix = keys.SchemasPrefix + "versions/"
	globalLevelKey = keys.SchemasPrefix + "config"
	levelsPrefix   = keys.SchemasPrefix + "config/"
)

func idKey(id int64) string            { return fmt.Sprintf("%s%020d", idsPrefix, id) }
func hashKey(fp string) string         { return hashesPrefix + fp }
func subjectKey(subject string) string { return subjectsPrefix + url.PathEscape(subject) }
func levelKey(subject string) string   { return levelsPrefix + url.PathEscape(subject) }
func versionsOf(subject string) string { return versionsPrefix + url.PathEscape(subject) + "/" }
func versionKey(subject string, version int) string {
	return fmt.Sprintf("%s%010d", versionsOf(subject), version)
}

// schemaRecord is the value of ids/<id>. It never changes.
type schemaRecord struct {
	Version int    `json:"v"` // record format version, 1
	ID      int64  `json:"id"`
	Format  Format `json:"format"`
	Text    string `json:"schema"`
}

// versionRecord is the value of versions/<subject>/<version>.
type versionRecord struct {
	Version int   `json:"version"`
	ID      int64 `json:"id"`
}

// subjectRecord is the value of subjects/<subject>.
type subjectRecord struct {
	Latest int `json:"latest"`
}

// subjectState is what a registration reads, with the revisions its
// transaction compares.
type subjectState struct {
	versions   []Version // versions[i].Version == i+1
	level      Level
	subjectRev int64 // ModRevision of subjects/<subject>, 0 if absent
	lastID     int64
	lastIDRev  int64
	reusableID int64 // id of the candidate's fingerprint, 0 if none
	hashRev    int64
}

// store does the registry's etcd I/O.
type store struct{ etcd *clientv3.Client }

func (s store) getJSON(ctx context.Context, key string, v any) (bool, int64, error) {
	resp, err := s.etcd.Get(ctx, key)
	if err != nil || len(resp.Kvs) == 0 {
		return false, 0, err
	}
	if err := json.Unmarshal(resp.Kvs[0].Value, v); err != nil {
		return false, 0, fmt.Errorf("decode %s: %w", key, err)
	}
	return true, resp.Kvs[0].ModRevision, nil
}

func (s store) schema(ctx context.Context, id int64) (schemaRecord, bool, error) {
	var rec schemaRecord
	found, _, err := s.getJSON(ctx, idKey(id), &rec)
	return rec, found, err
}

// versions reads a subject's versions, oldest first, with their schemas.
func (s store) versions(ctx context.Context, subject string) ([]Version, error) {
	resp, err := s.etcd.Get(ctx, versionsOf(subject), versionsRange()...)
	if err != nil {
		return nil, err
	}
	return s.withSchemas(ctx, subject, resp.Kvs)
}

func versionsRange() []clientv3.OpOption {
	return []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend)}
}

// withSchemas decodes version records and reads their schemas, which
// never change, so any later read of them is consistent.
func (s store) withSchemas(ctx context.Context, subject string, kvs []*mvccpb.KeyValue) ([]Version, error) {
	out := make([]Version, 0, len(kvs))
	for _, kv := range kvs {
		var rec versionRecord
		if err := json.Unmarshal(kv.Value, &rec); err != nil {
			return nil, fmt.Errorf("decode %s: %w", kv.Key, err)
		}
		sch, found, err := s.schema(ctx, rec.ID)
		if err != nil {
			return nil, err
		}
		if !found {
			return nil, fmt.Errorf("schema id %d of %s missing", rec.ID, kv.Key)
		}
		out = append(out, Version{Subject: subject, Version: rec.Version, ID: rec.ID, Format: sch.Format, Text: sch.Text})
	}
	return out, nil
}

// level is the subject's own level, or "" if it has none.
func (s store) level(ctx context.Context, key string) (Level, error) {
	resp, err := s.etcd.Get(ctx, key)
	if err != nil || len(resp.Kvs) == 0 {
		return "", err
	}
	return ParseLevel(string(resp.Kvs[0].Value))
}

// effectiveLevel is the subject's level, else the global one, else BACKWARD.
func (s store) effectiveLevel(ctx context.Context, subject string) (Level, error) {
	for _, key := range []string{levelKey(subject), globalLevelKey} {
		level, err := s.level(ctx, key)
		if err != nil || level != "" {
			return level, err
		}
	}
	return DefaultLevel, nil
}

// readSubject reads what registering fp under subject depends on, all
// at one revision (one transaction), so the head, the versions and the
// counters agree with each other.
func (s store) readSubject(ctx context.Context, subject, fp string) (subjectState, error) {
	var st subjectState
	resp, err := s.etcd.Txn(ctx).Then(
		clientv3.OpGet(subjectKey(subject)),
		clientv3.OpGet(versionsOf(subject), versionsRange()...),
		clientv3.OpGet(nextIDKey),
		clientv3.OpGet(hashKey(fp)),
		clientv3.OpGet(levelKey(subject)),
		clientv3.OpGet(globalLevelKey),
	).Commit()
	if err != nil {
		return st, err
	}
	kvs := make([][]*mvccpb.KeyValue, len(resp.Responses))
	for i, r := range resp.Responses {
		kvs[i] = r.GetResponseRange().Kvs
	}
	var head subjectRecord
	if len(kvs[0]) == 1 {
		if err := json.Unmarshal(kvs[0][0].Value, &head); err != nil {
			return st, fmt.Errorf("decode %s: %w", kvs[0][0].Key, err)
		}
		st.subjectRev = kvs[0][0].ModRevision
	}
	if st.versions, err = s.withSchemas(ctx, subject, kvs[1]); err != nil {
		return st, err
	}
	if len(st.versions) != head.Latest {
		return st, fmt.Errorf("subject %q: %d versions stored, head says %d", subject, len(st.versions), head.Latest)
	}
	if st.lastID, st.lastIDRev, err = decimal(kvs[2]); err != nil {
		return st, err
	}
	if st.reusableID, st.hashRev, err = decimal(kvs[3]); err != nil {
		return st, err
	}
	st.level, err = firstLevel(kvs[4], kvs[5])
	return st, err
}

// decimal decodes a counter read and its revision (0, 0 if absent).
func decimal(kvs []*mvccpb.KeyValue) (int64, int64, error) {
	if len(kvs) == 0 {
		return 0, 0, nil
	}
	n, err := strconv.ParseInt(string(kvs[0].Value), 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("decode %s: %w", kvs[0].Key, err)
	}
	return n, kvs[0].ModRevision, nil
}

// firstLevel is the first level set among reads, else DefaultLevel.
func firstLevel(reads ...[]*mvccpb.KeyValue) (Level, error) {
	for _, kvs := range reads {
		if len(kvs) == 1 {
			return ParseLevel(string(kvs[0].Value))
		}
	}
	return DefaultLevel, nil
}

// commit writes a planned registration if nothing it read has changed.
func (s store) commit(ctx context.Context, subject string, st subjectState, p plan) (bool, error) {
	cmps := []clientv3.Cmp{
		clientv3.Compare(clientv3.ModRevision(subjectKey(subject)), "=", st.subjectRev),
		clientv3.Compare(clientv3.ModRevision(hashKey(p.fingerprint)), "=", st.hashRev),
	}
	var ops []clientv3.Op
	if p.newID {
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(nextIDKey), "=", st.lastIDRev))
		rec, _ := json.Marshal(schemaRecord{Version: 1, ID: p.version.ID, Format: p.version.Format, Text: p.version.Text})
		ops = append(ops,
			clientv3.OpPut(nextIDKey, strconv.FormatInt(p.version.ID, 10)),
			clientv3.OpPut(idKey(p.version.ID), string(rec)),
			clientv3.OpPut(hashKey(p.fingerprint), strconv.FormatInt(p.version.ID, 10)))
	}
	head, _ := json.Marshal(subjectRecord{Latest: p.version.Version})
	ver, _ := json.Marshal(versionRecord{Version: p.version.Version, ID: p.version.ID})
	ops = append(ops,
		clientv3.OpPut(subjectKey(subject), string(head)),
		clientv3.OpPut(versionKey(subject, p.version.Version), string(ver)))
	resp, err := s.etcd.Txn(ctx).If(cmps...).Then(ops...).Commit()
	if err != nil {
		return false, err
	}
	return resp.Succeeded, nil
}

// subjects lists subject names in key order.
func (s store) subjects(ctx context.Context) ([]string, error) {
	resp, err := s.etcd.Get(ctx, subjectsPrefix, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		name, err := url.PathUnescape(strings.TrimPrefix(string(kv.Key), subjectsPrefix))
		if err != nil {
			return nil, fmt.Errorf("decode %s: %w", kv.Key, err)
		}
		out = append(out, name)
	}
	return out, nil
}
