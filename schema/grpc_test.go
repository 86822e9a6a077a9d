package schema

import (
	"context"
	"testing"

	"orderlog/internal/apierr"
	"orderlog/proto/orderlogpb"
)

// asked records what a Service asked its Authorize, and refuses it all.
type asked struct {
	access  Access
	subject string
	calls   int
}

func (a *asked) authorize(_ context.Context, access Access, subject string) error {
	a.access, a.subject = access, subject
	a.calls++
	return apierr.New(apierr.PermissionDenied, "no")
}

// TestServiceAuthorizesAsTheRESTPathDoes: each call asks for the access
// and subject its REST counterpart asks for (TestHandlerAuthorizesEachCallOnItsSubject),
// before it reads or writes anything, and a refusal is its answer.
func TestServiceAuthorizesAsTheRESTPathDoes(t *testing.T) {
	reg := newRegistry(t)
	mustRegister(t, reg, "orders", Avro, userV1)
	ctx := context.Background()
	var a asked
	svc := NewService(reg, a.authorize)
	for name, c := range map[string]struct {
		call    func() error
		access  Access
		subject string
	}{
		"register": {func() error {
			_, err := svc.RegisterSchema(ctx, &orderlogpb.RegisterSchemaRequest{Subject: "orders", Text: userV2})
			return err
		}, WriteAccess, "orders"},
		"versions": {func() error {
			_, err := svc.ListSchemaVersions(ctx, &orderlogpb.ListSchemaVersionsRequest{Subject: "orders"})
			return err
		}, ReadAccess, "orders"},
		"get_version": {func() error {
			_, err := svc.GetSchema(ctx, &orderlogpb.GetSchemaRequest{Subject: "orders", Version: 1})
			return err
		}, ReadAccess, "orders"},
		"get_id_every_topic": {func() error {
			_, err := svc.GetSchema(ctx, &orderlogpb.GetSchemaRequest{Subject: "orders", Id: 1})
			return err
		}, ReadAccess, ""},
		"check": {func() error {
			_, err := svc.CheckSchema(ctx, &orderlogpb.CheckSchemaRequest{Subject: "orders", Text: userV2})
			return err
		}, ReadAccess, "orders"},
		"get_config": {func() error {
			_, err := svc.GetSchemaConfig(ctx, &orderlogpb.GetSchemaConfigRequest{Subject: "orders"})
			return err
		}, ReadAccess, "orders"},
		"get_global_config": {func() error {
			_, err := svc.GetSchemaConfig(ctx, &orderlogpb.GetSchemaConfigRequest{})
			return err
		}, ReadAccess, ""},
		"set_config": {func() error {
			_, err := svc.SetSchemaConfig(ctx, &orderlogpb.SchemaConfig{Subject: "orders", Compatibility: "NONE"})
			return err
		}, WriteAccess, "orders"},
		"list_subjects_filters": {func() error {
			resp, err := svc.ListSubjects(ctx, &orderlogpb.ListSubjectsRequest{})
			if err == nil && len(resp.Subjects) == 0 {
				return apierr.New(apierr.PermissionDenied, "filtered out")
			}
			return err
		}, ReadAccess, "orders"},
	} {
		a = asked{}
		if err := c.call(); apiCode(err) != apierr.PermissionDenied {
			t.Errorf("%s: %v, want PERMISSION_DENIED", name, err)
		}
		if a.calls != 1 || a.access != c.access || a.subject != c.subject {
			t.Errorf("%s asked %+v, want one call for access %d on %q", name, a, c.access, c.subject)
		}
	}
	if versions, _ := reg.Versions(ctx, "orders"); len(versions) != 1 {
		t.Errorf("%d versions after refused calls, want 1", len(versions))
	}
	if level, _ := reg.Level(ctx, "orders"); level != "" {
		t.Errorf("orders' level %q after a refused SetSchemaConfig, want none", level)
	}
}

// TestServiceRefusesBadRequestsBeforeWriting: a bad field of a request
// is its caller's error, and a config change with one bad field writes
// neither.
func TestServiceRefusesBadRequestsBeforeWriting(t *testing.T) {
	reg := newRegistry(t)
	mustRegister(t, reg, "orders", Avro, userV1)
	ctx := context.Background()
	svc := NewService(reg, nil)
	for name, c := range map[string]struct {
		call func() error
		want apierr.Code
	}{
		"empty_text": {func() error {
			_, err := svc.RegisterSchema(ctx, &orderlogpb.RegisterSchemaRequest{Subject: "orders"})
			return err
		}, apierr.InvalidSchema},
		"unknown_format": {func() error {
			_, err := svc.RegisterSchema(ctx, &orderlogpb.RegisterSchemaRequest{Subject: "orders", Format: "XML", Text: "<a/>"})
			return err
		}, apierr.InvalidSchema},
		"version_minus_two": {func() error {
			_, err := svc.GetSchema(ctx, &orderlogpb.GetSchemaRequest{Subject: "orders", Version: -2})
			return err
		}, apierr.InvalidArgument},
		"check_version_minus_two": {func() error {
			_, err := svc.CheckSchema(ctx, &orderlogpb.CheckSchemaRequest{Subject: "orders", Version: -2, Text: userV2})
			return err
		}, apierr.InvalidArgument},
		"good_level_bad_validation": {func() error {
			_, err := svc.SetSchemaConfig(ctx, &orderlogpb.SchemaConfig{Subject: "orders", Compatibility: "NONE", Validation: "sometimes"})
			return err
		}, apierr.InvalidArgument},
		"bad_level_good_validation": {func() error {
			_, err := svc.SetSchemaConfig(ctx, &orderlogpb.SchemaConfig{Subject: "orders", Compatibility: "ANY", Validation: "strict"})
			return err
		}, apierr.InvalidArgument},
		"global_validation": {func() error {
			_, err := svc.SetSchemaConfig(ctx, &orderlogpb.SchemaConfig{Compatibility: "NONE", Validation: "strict"})
			return err
		}, apierr.InvalidArgument},
	} {
		if err := c.call(); apiCode(err) != c.want {
			t.Errorf("%s: %v, want %s", name, err, c.want)
		}
	}
	cfg, err := svc.GetSchemaConfig(ctx, &orderlogpb.GetSchemaConfigRequest{Subject: "orders"})
	if err != nil || cfg.Compatibility != string(DefaultLevel) || cfg.Validation != string(ValidateNone) {
		t.Fatalf("config after refusals: %v, %v; want nothing written", cfg, err)
	}
	if global, err := reg.Level(ctx, ""); err != nil || global != DefaultLevel {
		t.Fatalf("global level %q, %v; want the default", global, err)
	}
}
