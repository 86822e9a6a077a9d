package schema

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"orderlog/internal/etcdtest"
)

func newRegistry(t *testing.T) *Registry {
	t.Helper()
	return New(etcdtest.Client(t))
}

var (
	userV1 = avroRecord(avroID + `,` + avroName)
	userV2 = avroRecord(avroID + `,` + avroName + `,{"name":"email","type":["null","string"],"default":null}`)
)

func mustRegister(t *testing.T, r *Registry, subject string, format Format, text string) Version {
	t.Helper()
	v, err := r.Register(context.Background(), subject, format, text)
	if err != nil {
		t.Fatalf("register %s: %v", subject, err)
	}
	return v
}

func TestRegisterAllocatesVersionsAndReusesIDs(t *testing.T) {
	r, ctx := newRegistry(t), context.Background()
	v1 := mustRegister(t, r, "orders", Avro, userV1)
	if v1.Version != 1 || v1.ID != 1 || v1.Subject != "orders" {
		t.Fatalf("first: %+v", v1)
	}
	again := mustRegister(t, r, "orders", Avro, "  "+userV1+"\n")
	if again.Version != 1 || again.ID != 1 {
		t.Fatalf("same schema again: %+v", again)
	}
	v2 := mustRegister(t, r, "orders", Avro, userV2)
	if v2.Version != 2 || v2.ID != 2 {
		t.Fatalf("second: %+v", v2)
	}
	other := mustRegister(t, r, "payments", Avro, userV2)
	if other.Version != 1 || other.ID != 2 {
		t.Fatalf("same schema, other subject, should reuse id 2: %+v", other)
	}
	asJSON := mustRegister(t, r, "events", JSONSchema, jsonObject(false, ``, jsonID))
	if asJSON.ID != 3 {
		t.Fatalf("new schema: %+v", asJSON)
	}
	versions, err := r.Versions(ctx, "orders")
	if err != nil || len(versions) != 2 || versions[1].Text != userV2 {
		t.Fatalf("versions %+v, %v", versions, err)
	}
	subjects, err := r.Subjects(ctx)
	if err != nil || fmt.Sprint(subjects) != "[events orders payments]" {
		t.Fatalf("subjects %v, %v", subjects, err)
	}
}

func TestRegisterRefusesAndWritesNothing(t *testing.T) {
	r, ctx := newRegistry(t), context.Background()
	mustRegister(t, r, "orders", Avro, userV1)
	_, err := r.Register(ctx, "orders", Avro, avroRecord(avroID+`,`+avroName+`,{"name":"email","type":"string"}`))
	var incompatible *IncompatibleError
	if apiCode(err) != "INCOMPATIBLE_SCHEMA" || !errors.As(err, &incompatible) || incompatible.Version != 1 || !incompatible.Backward {
		t.Fatalf("got %v", err)
	}
	if _, err := r.Register(ctx, "orders", Avro, `{"type":"record"}`); apiCode(err) != "INVALID_SCHEMA" {
		t.Fatalf("bad schema: %v", err)
	}
	if _, err := r.Register(ctx, "", Avro, userV1); apiCode(err) != "INVALID_ARGUMENT" {
		t.Fatalf("empty subject: %v", err)
	}
	if v, err := r.Get(ctx, "orders", Latest); err != nil || v.Version != 1 {
		t.Fatalf("latest %+v, %v", v, err)
	}
	if next := mustRegister(t, r, "other", Avro, `"string"`); next.ID != 2 {
		t.Fatalf("a refusal used up an id: %+v", next)
	}
}

func TestLevelsSubjectOverridesGlobalOverridesDefault(t *testing.T) {
	r, ctx := newRegistry(t), context.Background()
	if level, err := r.Level(ctx, ""); err != nil || level != Backward {
		t.Fatalf("default %q, %v", level, err)
	}
	mustRegister(t, r, "orders", Avro, userV1)
	removed := avroRecord(avroID)
	if err := r.SetLevel(ctx, "", Forward); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Register(ctx, "orders", Avro, removed); apiCode(err) != "INCOMPATIBLE_SCHEMA" {
		t.Fatalf("global FORWARD should refuse removing a field without default: %v", err)
	}
	if err := r.SetLevel(ctx, "orders", None); err != nil {
		t.Fatal(err)
	}
	if level, err := r.Level(ctx, "orders"); err != nil || level != None {
		t.Fatalf("subject level %q, %v", level, err)
	}
	if level, err := r.Level(ctx, "payments"); err != nil || level != "" {
		t.Fatalf("unset subject level %q, %v", level, err)
	}
	mustRegister(t, r, "orders", Avro, removed)
	if err := r.SetLevel(ctx, "orders", Level("SIDEWAYS")); apiCode(err) != "INVALID_ARGUMENT" {
		t.Fatalf("bad level: %v", err)
	}
}

func TestLookupsAnswerNotFoundCodes(t *testing.T) {
	r, ctx := newRegistry(t), context.Background()
	mustRegister(t, r, "orders", Avro, userV1)
	cases := map[string]struct {
		err  error
		code string
	}{
		"unknown_subject": {second(r.Get(ctx, "nope", Latest)), "UNKNOWN_SUBJECT"},
		"unknown_version": {second(r.Get(ctx, "orders", 2)), "UNKNOWN_SCHEMA_VERSION"},
		"version_zero":    {second(r.Get(ctx, "orders", 0)), "UNKNOWN_SCHEMA_VERSION"},
		"unknown_id":      {second(r.ByID(ctx, 99)), "UNKNOWN_SCHEMA"},
		"not_in_subject":  {second(r.Lookup(ctx, "orders", Avro, userV2)), "UNKNOWN_SCHEMA"},
	}
	for name, c := range cases {
		if string(apiCode(c.err)) != c.code {
			t.Errorf("%s: %v, want %s", name, c.err, c.code)
		}
	}
	if v, err := r.Lookup(ctx, "orders", Avro, userV1); err != nil || v.Version != 1 || v.ID != 1 {
		t.Fatalf("lookup %+v, %v", v, err)
	}
	if v, err := r.ByID(ctx, 1); err != nil || v.Text != userV1 || v.Format != Avro {
		t.Fatalf("by id %+v, %v", v, err)
	}
}

func TestSubjectsWithSlashesAreDistinct(t *testing.T) {
	r, ctx := newRegistry(t), context.Background()
	mustRegister(t, r, "a", Avro, `"string"`)
	mustRegister(t, r, "a/versions/0000000001", Avro, `"int"`)
	if vs, err := r.Versions(ctx, "a"); err != nil || len(vs) != 1 || vs[0].Text != `"string"` {
		t.Fatalf("a: %+v, %v", vs, err)
	}
	if subjects, _ := r.Subjects(ctx); len(subjects) != 2 || subjects[1] != "a/versions/0000000001" {
		t.Fatalf("subjects %q", subjects)
	}
}

func TestCheckCompatibilityAgainstOneVersionOrAll(t *testing.T) {
	r, ctx := newRegistry(t), context.Background()
	mustRegister(t, r, "orders", Avro, avroRecord(avroID))
	if err := r.SetLevel(ctx, "orders", None); err != nil {
		t.Fatal(err)
	}
	mustRegister(t, r, "orders", Avro, avroRecord(`{"name":"id","type":"string"}`))
	if err := r.SetLevel(ctx, "orders", BackwardTransitive); err != nil {
		t.Fatal(err)
	}
	candidate := avroRecord(`{"name":"id","type":"string"}, {"name":"n","type":"int","default":0}`)
	if err := r.CheckCompatibility(ctx, "orders", Latest, Avro, candidate); err != nil {
		t.Fatalf("against latest: %v", err)
	}
	if err := r.CheckCompatibility(ctx, "orders", 1, Avro, candidate); apiCode(err) != "INCOMPATIBLE_SCHEMA" {
		t.Fatalf("against version 1: %v", err)
	}
	if err := r.CheckCompatibility(ctx, "orders", 0, Avro, candidate); apiCode(err) != "INCOMPATIBLE_SCHEMA" {
		t.Fatalf("against all: %v", err)
	}
	if err := r.CheckCompatibility(ctx, "nope", Latest, Avro, candidate); apiCode(err) != "UNKNOWN_SUBJECT" {
		t.Fatalf("unknown subject: %v", err)
	}
}

// Registrations racing on one subject and across subjects get distinct
// versions and ids with no gaps: the transaction compares what it read.
// A failed attempt means another registration committed, so none of the
// n needs more than n attempts (maxAttempts is 16).
func TestConcurrentRegistrationsNeverShareVersionsOrIDs(t *testing.T) {
	r, ctx := newRegistry(t), context.Background()
	if err := r.SetLevel(ctx, "", None); err != nil {
		t.Fatal(err)
	}
	const n = 12
	results := make([]Version, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			subject := []string{"shared", fmt.Sprintf("own-%d", i)}[i%2]
			results[i], errs[i] = r.Register(ctx, subject, Avro, fmt.Sprintf(`{"type":"fixed","name":"F","size":%d}`, i+1))
		})
	}
	wg.Wait()
	ids, sharedVersions := map[int64]bool{}, map[int]bool{}
	for i, v := range results {
		if errs[i] != nil {
			t.Fatalf("register %d: %v", i, errs[i])
		}
		ids[v.ID] = true
		if v.Subject == "shared" {
			sharedVersions[v.Version] = true
		}
	}
	for id := int64(1); id <= n; id++ {
		if !ids[id] {
			t.Fatalf("ids %v: missing %d", ids, id)
		}
	}
	for v := 1; v <= n/2; v++ {
		if !sharedVersions[v] {
			t.Fatalf("shared versions %v: missing %d", sharedVersions, v)
		}
	}
}

func second[T any](_ T, err error) error { return err }
