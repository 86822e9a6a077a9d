package tiering

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"orderlog/proto/orderlogpb"
	"orderlog/schema"
	"orderlog/tiering/objstore"
	"orderlog/tiering/objstore/s3test"
	"orderlog/tiering/parquetfile"
	"orderlog/tiering/parquetfile/duckcheck"
)

const (
	ordersV1 = `{"type":"object","properties":{"id":{"type":"integer"}}}`
	ordersV2 = `{"type":"object","properties":{"id":{"type":"integer"},"note":{"type":"string"}}}`
	usersV1  = `{"type":"record","name":"User","fields":[{"name":"name","type":"string"}]}`
	otherV1  = `{"type":"string"}`
)

// schemaIDs are the ids of the test registry: orders v1 and v2 (JSON
// Schema), users v1 (Avro), and other v1, a version of no topic's subject
// in the log.
type schemaIDs struct{ ordersV1, ordersV2, usersV1, other uint32 }

func registerSchemas(t *testing.T, reg *schema.Registry) schemaIDs {
	t.Helper()
	ctx := context.Background()
	if err := reg.SetLevel(ctx, "orders", schema.None); err != nil {
		t.Fatal(err)
	}
	id := func(subject string, format schema.Format, text string) uint32 {
		v, err := reg.Register(ctx, subject, format, text)
		if err != nil {
			t.Fatal(err)
		}
		return uint32(v.ID)
	}
	return schemaIDs{id("orders", schema.JSONSchema, ordersV1), id("orders", schema.JSONSchema, ordersV2),
		id("users", schema.Avro, usersV1), id("other", schema.JSONSchema, otherV1)}
}

// growWithSchemas appends n offsets, every seventh a hole, their messages
// cycling through: orders with ordersV1's id (version 1), with ordersV2's
// (2), with other's (null: not an orders version), users with usersV1's
// (1), users with ordersV1's (null), orders without an id (null).
func (l *memLog) growWithSchemas(n int, at time.Time, ids schemaIDs) {
	l.mu.Lock()
	defer l.mu.Unlock()
	cycle := []struct {
		topic string
		id    uint32
	}{{"orders", ids.ordersV1}, {"orders", ids.ordersV2}, {"orders", ids.other}, {"users", ids.usersV1}, {"users", ids.ordersV1}, {"orders", 0}}
	for range n {
		o := l.committed
		if o%7 != 3 {
			c := cycle[o%6]
			l.messages[o] = &orderlogpb.StoredMessage{Offset: o, ProducerId: 1, ProducerSeq: o, IngestTimeUs: at.UnixMicro(),
				Message: &orderlogpb.Message{Topic: c.topic, Key: fmt.Appendf(nil, "k%d", o%5), SchemaId: c.id,
					Value: fmt.Appendf(nil, `{"id":%d,"pad":"%s"}`, o, strings.Repeat("x", 180))}}
		}
		l.committed++
	}
}

// wantVersion is the schema_version growWithSchemas's message m has when
// resolved against registry versions vs (subject → id → version).
func wantVersion(m *orderlogpb.StoredMessage, vs map[string]map[uint32]int32) int32 {
	return vs[m.Message.Topic][m.Message.SchemaId]
}

func (w *workerWorld) versionsByRow(t *testing.T) map[uint64]int32 {
	t.Helper()
	ctx := context.Background()
	objects, err := w.store.List(ctx, "dt=")
	if err != nil {
		t.Fatal(err)
	}
	got := map[uint64]int32{}
	for _, o := range objects {
		data, err := w.store.Get(ctx, o.Key)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parquetfile.Open(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Verify(ctx); err != nil {
			t.Fatal(err)
		}
		err = f.ReadVersioned(ctx, 0, 1<<62, func(m *orderlogpb.StoredMessage, v int32) error {
			got[m.Offset] = v
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return got
}

func (w *workerWorld) checkVersions(t *testing.T, want func(m *orderlogpb.StoredMessage) int32) {
	t.Helper()
	got := w.versionsByRow(t)
	for o, v := range got {
		if m := w.log.messages[o]; want(m) != v {
			t.Fatalf("offset %d (%s, schema id %d): schema_version %d, want %d", o, m.Message.Topic, m.Message.SchemaId, v, want(m))
		}
	}
	if len(got) == 0 {
		t.Fatal("no rows archived")
	}
}

func (w *workerWorld) runUntil(t *testing.T, wk *Worker, l *leader, end uint64) {
	t.Helper()
	w.now = w.now.Add(time.Minute)
	for range 50 {
		if err := wk.Pass(context.Background(), l); err != nil {
			t.Fatal(err)
		}
		if w.head(t).T == end {
			return
		}
	}
	t.Fatalf("T %d, want %d", w.head(t).T, end)
}

// TestTheArchiveResolvesSchemaVersions: rows carry the schema version of
// their id within their topic's subject (null for no id, or an id of
// another subject), each version named has its _schemas/ object, archived
// reads return schema ids, and DuckDB joins the rows to their schemas:
// with the file store and with an S3 server.
func TestTheArchiveResolvesSchemaVersions(t *testing.T) {
	for _, storeKind := range []string{"file", "s3"} {
		t.Run(storeKind, func(t *testing.T) {
			w := newWorkerWorld(t)
			if storeKind == "s3" {
				w.store = s3Store(t)
			}
			reg := schema.New(w.cli)
			ids := registerSchemas(t, reg)
			w.schemas = NewSchemaResolver(reg)
			w.log.growWithSchemas(300, w.now, ids)
			wk, l := w.worker(t, "a", w.store)
			w.runUntil(t, wk, l, 300)
			if w.head(t).Files < 2 {
				t.Fatalf("head %+v: want several files", w.head(t))
			}
			vs := map[string]map[uint32]int32{"orders": {ids.ordersV1: 1, ids.ordersV2: 2}, "users": {ids.usersV1: 1}}
			w.checkVersions(t, func(m *orderlogpb.StoredMessage) int32 { return wantVersion(m, vs) })
			w.checkArchive(t)
			checkSchemaObjects(t, w.store, reg, map[string]bool{"_schemas/orders/1.json": true, "_schemas/orders/2.json": true, "_schemas/users/1.json": true})
			checkDuckDBJoin(t, w, vs)
		})
	}
}

func s3Store(t *testing.T) objstore.Store {
	t.Helper()
	server := s3test.Start(t)
	server.SetEnv(t)
	store, err := objstore.Open(context.Background(), "s3://"+server.Bucket+"/archive", objstore.Options{Endpoint: server.Endpoint})
	if err != nil {
		t.Fatal(err)
	}
	return store
}

// checkSchemaObjects checks that the _schemas/ objects are want, each the
// registry's version.
func checkSchemaObjects(t *testing.T, store objstore.Store, reg *schema.Registry, want map[string]bool) {
	t.Helper()
	ctx := context.Background()
	objects, err := store.List(ctx, "_schemas/")
	if err != nil {
		t.Fatal(err)
	}
	if len(objects) != len(want) {
		t.Fatalf("%d schema objects %v, want %v", len(objects), objects, want)
	}
	for _, o := range objects {
		if !want[o.Key] {
			t.Fatalf("schema object %s not expected", o.Key)
		}
		raw, err := store.Get(ctx, o.Key)
		if err != nil {
			t.Fatal(err)
		}
		var got schemaObject
		if err := json.Unmarshal(raw, &got); err != nil {
			t.Fatal(err)
		}
		v, err := reg.Get(ctx, got.Subject, got.Version)
		if err != nil {
			t.Fatal(err)
		}
		if o.Key != SchemaObjectKey(got.Subject, got.Version) || got.ID != v.ID || got.Schema != v.Text || got.SchemaType != string(v.Format) {
			t.Fatalf("%s holds %s, the registry's version is %+v", o.Key, raw, v)
		}
	}
}

// checkDuckDBJoin copies the archive to a directory and has DuckDB join
// every row to the schema object its topic and schema_version name.
func checkDuckDBJoin(t *testing.T, w *workerWorld, vs map[string]map[uint32]int32) {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	objects, err := w.store.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objects {
		data, err := w.store.Get(ctx, o.Key)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, filepath.FromSlash(o.Key))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var rows [][]any
	duckcheck.Run(t, &rows, "--schemas", dir)
	texts := map[int64]string{}
	for _, text := range []string{ordersV1, ordersV2, usersV1} {
		for _, v := range []string{"orders", "users"} {
			if got, err := schema.New(w.cli).Lookup(ctx, v, guessFormat(text), text); err == nil {
				texts[got.ID] = text
			}
		}
	}
	n := 0
	for _, r := range rows {
		offset := uint64(r[0].(float64))
		m := w.log.messages[offset]
		want := wantVersion(m, vs)
		schemaID, version := r[2], r[3]
		switch {
		case m == nil || r[1] != m.Message.Topic:
			t.Fatalf("DuckDB row %v: the log has %v", r, m)
		case m.Message.SchemaId == 0 && schemaID != nil, m.Message.SchemaId != 0 && schemaID != float64(m.Message.SchemaId):
			t.Fatalf("DuckDB row %v: schema id %d", r, m.Message.SchemaId)
		case want == 0 && (version != nil || r[4] != nil):
			t.Fatalf("DuckDB row %v: want no schema", r)
		case want != 0 && (version != float64(want) || r[4] != float64(m.Message.SchemaId) || r[6] != texts[int64(m.Message.SchemaId)]):
			t.Fatalf("DuckDB row %v: want version %d, schema id %d, text %s", r, want, m.Message.SchemaId, texts[int64(m.Message.SchemaId)])
		}
		n++
	}
	if n != len(w.versionsByRow(t)) {
		t.Fatalf("DuckDB joined %d rows, the archive holds %d", n, len(w.versionsByRow(t)))
	}
}

func guessFormat(text string) schema.Format {
	if strings.Contains(text, `"record"`) {
		return schema.Avro
	}
	return schema.JSONSchema
}

// TestARegistrationAfterThePlanLeavesTheRePutEqual: a worker crashes
// after uploading a file in which an id was no version of its topic's
// subject; the id is then registered under that subject. The successor
// builds the plan's file again under the plan's rule (versions registered
// before the plan), so its rows, digest and footer are the first
// attempt's and it adopts the object instead of halting; files planned
// after the registration name the new version.
func TestARegistrationAfterThePlanLeavesTheRePutEqual(t *testing.T) {
	w := newWorkerWorld(t)
	reg := schema.New(w.cli)
	ids := registerSchemas(t, reg)
	w.schemas = NewSchemaResolver(reg)
	w.log.growWithSchemas(300, w.now, ids)
	ctx, stop := context.WithCancel(context.Background())
	first, l1 := w.worker(t, "first", &crashingStore{Store: w.store, after: ".parquet", stop: stop})
	for ctx.Err() == nil {
		if err := first.Pass(ctx, l1); err != nil && ctx.Err() == nil {
			t.Fatal(err)
		}
	}
	plan, err := readPlan(context.Background(), w.cli)
	if err != nil || plan.ModRevision == 0 {
		t.Fatalf("no plan left: %v", err)
	}
	v3, err := reg.Register(context.Background(), "orders", schema.JSONSchema, otherV1)
	if err != nil || uint32(v3.ID) != ids.other || v3.Version != 3 {
		t.Fatalf("registering other's schema under orders: %+v, %v", v3, err)
	}
	w.schemas = NewSchemaResolver(reg) // a new process: nothing remembered
	second, l2 := w.worker(t, "second", w.store)
	w.runUntil(t, second, l2, 300)
	vs := map[string]map[uint32]int32{"orders": {ids.ordersV1: 1, ids.ordersV2: 2}, "users": {ids.usersV1: 1}}
	w.checkVersions(t, func(m *orderlogpb.StoredMessage) int32 {
		if m.Offset >= plan.End && m.Message.Topic == "orders" && m.Message.SchemaId == ids.other {
			return 3
		}
		return wantVersion(m, vs)
	})
	w.checkArchive(t)
	checkSchemaObjects(t, w.store, reg, map[string]bool{"_schemas/orders/1.json": true, "_schemas/orders/2.json": true,
		"_schemas/orders/3.json": true, "_schemas/users/1.json": true})
}

// registeringResolver registers other's schema under orders right after
// the first time it answers that other's id is no orders version: between
// a new file's build and its plan.
type registeringResolver struct {
	SchemaResolver
	reg  *schema.Registry
	ids  schemaIDs
	once sync.Once
}

func (r *registeringResolver) VersionOf(ctx context.Context, topic string, id uint32, fresh int64) (schema.IDVersion, error) {
	v, err := r.SchemaResolver.VersionOf(ctx, topic, id, fresh)
	if err == nil && topic == "orders" && id == r.ids.other && v.Version == 0 {
		r.once.Do(func() { _, err = r.reg.Register(ctx, "orders", schema.JSONSchema, otherV1) })
	}
	return v, err
}

// TestARegistrationBeforeThePlanBuildsTheFileAgain: an id resolved to no
// version while a file was built, and registered under the topic's subject
// before the file's plan was recorded, makes the worker build the file
// again under the plan's rule: the rows name the version.
func TestARegistrationBeforeThePlanBuildsTheFileAgain(t *testing.T) {
	w := newWorkerWorld(t)
	reg := schema.New(w.cli)
	ids := registerSchemas(t, reg)
	w.schemas = &registeringResolver{SchemaResolver: NewSchemaResolver(reg), reg: reg, ids: ids}
	w.log.growWithSchemas(300, w.now, ids)
	wk, l := w.worker(t, "a", w.store)
	w.runUntil(t, wk, l, 300)
	vs := map[string]map[uint32]int32{"orders": {ids.ordersV1: 1, ids.ordersV2: 2, ids.other: 3}, "users": {ids.usersV1: 1}}
	w.checkVersions(t, func(m *orderlogpb.StoredMessage) int32 { return wantVersion(m, vs) })
	w.checkArchive(t)
}

func TestSchemaObjectKey(t *testing.T) {
	for topic, want := range map[string]string{
		"orders": "_schemas/orders/2.json",
		"a/b c":  "_schemas/a%2Fb%20c/2.json",
		"..":     "_schemas/%2E./2.json",
		".hid":   "_schemas/%2Ehid/2.json",
	} {
		if got := SchemaObjectKey(topic, 2); got != want {
			t.Errorf("SchemaObjectKey(%q) = %q, want %q", topic, got, want)
		}
	}
}
