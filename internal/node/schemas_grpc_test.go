package node

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"orderlog/client"
	"orderlog/internal/apierr"
	"orderlog/proto/orderlogpb"
)

// The orders schema: v2 adds a field with a default (backward
// compatible), refused adds one without (a reader of v1's data has no
// value for it).
const (
	ordersV1      = `{"type":"record","name":"Order","fields":[{"name":"id","type":"long"}]}`
	ordersV2      = `{"type":"record","name":"Order","fields":[{"name":"id","type":"long"},{"name":"note","type":"string","default":""}]}`
	ordersRefused = `{"type":"record","name":"Order","fields":[{"name":"id","type":"long"},{"name":"email","type":"string"}]}`
)

// schemaClients dials s once per token and returns each client's registry.
func schemaClients(t *testing.T, s *Server, tokens ...string) []client.SchemaRegistry {
	t.Helper()
	out := make([]client.SchemaRegistry, len(tokens))
	for i, token := range tokens {
		c, err := client.Dial(s.GRPCAddr(), client.WithToken(token))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		out[i] = c.Schemas()
	}
	return out
}

// TestSchemasServiceOverGRPC drives the Schemas service over real gRPC on
// a node with embedded etcd and authentication on: registration, listing,
// reads by version and by id, a refused incompatible version, checks,
// configuration (compatibility and validation), and the topic ACLs the
// REST path applies.
func TestSchemasServiceOverGRPC(t *testing.T) {
	s, conn, ctx, root := serverWithRoot(t)
	defer s.Close()
	token := func(principal string, acls ...*orderlogpb.AclEntry) string {
		return tokenWithACLs(as(ctx, root), t, conn, principal, acls...)
	}
	aliceToken := token("alice", &orderlogpb.AclEntry{Principal: "alice", Topic: "orders", Operation: "read"})
	bobToken := token("bob", &orderlogpb.AclEntry{Principal: "bob", Topic: "orders", Operation: "admin"})
	malloryToken := token("mallory")
	regs := schemaClients(t, s, root, aliceToken, bobToken, malloryToken)
	rootReg, alice, bob, mallory := regs[0], regs[1], regs[2], regs[3]
	waitFor(t, 10*time.Second, "the tokens and ACLs, mallory's last", func() bool {
		_, err := mallory.Versions(ctx, "orders")
		return apierr.As(err).Code == apierr.PermissionDenied
	})

	v1, err := bob.Register(ctx, "orders", "avro", ordersV1)
	if err != nil || v1.Version != 1 || v1.Id == 0 || v1.Format != "AVRO" || v1.Subject != "orders" {
		t.Fatalf("register v1: %v, %v", v1, err)
	}
	if again, err := bob.Register(ctx, "orders", "AVRO", ordersV1); err != nil || again.Version != 1 || again.Id != v1.Id {
		t.Fatalf("register v1 again: %v, %v; want version 1 id %d", again, err, v1.Id)
	}
	if _, err := rootReg.Register(ctx, "secret", "JSON", `{"type":"object"}`); err != nil {
		t.Fatal(err)
	}

	t.Run("incompatible_refused", func(t *testing.T) {
		_, err := bob.Register(ctx, "orders", "AVRO", ordersRefused)
		if e := apierr.As(err); e.Code != apierr.IncompatibleSchema || !strings.Contains(e.Message, "email") || !strings.Contains(e.Message, "version 1") {
			t.Fatalf("register a field without default: %v; want INCOMPATIBLE_SCHEMA naming email and version 1", err)
		}
		_, err = orderlogpb.NewSchemasClient(conn).RegisterSchema(as(ctx, bobToken),
			&orderlogpb.RegisterSchemaRequest{Subject: "orders", Format: "AVRO", Text: ordersRefused})
		if status.Code(err) != codes.FailedPrecondition {
			t.Fatalf("raw gRPC status %v, want FailedPrecondition", err)
		}
	})

	v2, err := bob.Register(ctx, "orders", "AVRO", ordersV2)
	if err != nil || v2.Version != 2 || v2.Id == v1.Id {
		t.Fatalf("register v2: %v, %v", v2, err)
	}

	t.Run("list_and_get", func(t *testing.T) {
		versions, err := alice.Versions(ctx, "orders")
		if err != nil || len(versions) != 2 || versions[0].Text != ordersV1 || versions[1].Id != v2.Id {
			t.Fatalf("versions: %v, %v", versions, err)
		}
		for version, want := range map[int32]*orderlogpb.SchemaVersion{1: v1, 2: v2, 0: v2, -1: v2} {
			got, err := alice.Get(ctx, "orders", version)
			if err != nil || got.Version != want.Version || got.Id != want.Id || got.Text != want.Text {
				t.Errorf("get version %d: %v, %v; want %v", version, got, err, want)
			}
		}
		if _, err := alice.Get(ctx, "orders", 3); apierr.As(err).Code != apierr.UnknownSchemaVersion {
			t.Errorf("get version 3: %v, want UNKNOWN_SCHEMA_VERSION", err)
		}
		if _, err := rootReg.Get(ctx, "nothing", 1); apierr.As(err).Code != apierr.UnknownSubject {
			t.Errorf("get an unknown subject: %v, want UNKNOWN_SUBJECT", err)
		}
		byID, err := rootReg.ByID(ctx, v1.Id)
		if err != nil || byID.Text != ordersV1 || byID.Format != "AVRO" || byID.Id != v1.Id {
			t.Errorf("by id %d: %v, %v", v1.Id, byID, err)
		}
		if _, err := rootReg.ByID(ctx, 999); apierr.As(err).Code != apierr.UnknownSchema {
			t.Errorf("by id 999: %v, want UNKNOWN_SCHEMA", err)
		}
		all, err := rootReg.Subjects(ctx)
		if err != nil || !slices.Equal(all, []string{"orders", "secret"}) {
			t.Errorf("root's subjects: %v, %v", all, err)
		}
		mine, err := alice.Subjects(ctx)
		if err != nil || !slices.Equal(mine, []string{"orders"}) {
			t.Errorf("alice's subjects: %v, %v; want only orders", mine, err)
		}
	})

	t.Run("check", func(t *testing.T) {
		resp, err := alice.Check(ctx, "orders", 0, "AVRO", ordersRefused)
		if err != nil || resp.Compatible || len(resp.Messages) != 1 || !strings.Contains(resp.Messages[0], "email") {
			t.Fatalf("check the refused schema: %v, %v; want incompatible naming email", resp, err)
		}
		if resp, err := alice.Check(ctx, "orders", -1, "AVRO", ordersV2); err != nil || !resp.Compatible {
			t.Fatalf("check v2 against the latest: %v, %v", resp, err)
		}
		if _, err := alice.Check(ctx, "orders", 0, "AVRO", `{"type":"record"}`); apierr.As(err).Code != apierr.InvalidSchema {
			t.Fatalf("check an invalid schema: %v, want INVALID_SCHEMA", err)
		}
	})

	t.Run("config", func(t *testing.T) {
		cfg, err := alice.Config(ctx, "orders")
		if err != nil || cfg.Compatibility != "BACKWARD" || cfg.Validation != "none" {
			t.Fatalf("default config: %v, %v; want BACKWARD, none", cfg, err)
		}
		cfg, err = bob.SetConfig(ctx, &orderlogpb.SchemaConfig{Subject: "orders", Validation: "strict"})
		if err != nil || cfg.Compatibility != "BACKWARD" || cfg.Validation != "strict" {
			t.Fatalf("set validation: %v, %v; want BACKWARD left as it was, strict", cfg, err)
		}
		cfg, err = bob.SetConfig(ctx, &orderlogpb.SchemaConfig{Subject: "orders", Compatibility: "full"})
		if err != nil || cfg.Compatibility != "FULL" || cfg.Validation != "strict" {
			t.Fatalf("set compatibility: %v, %v; want FULL, strict left as it was", cfg, err)
		}
		if cfg, err = alice.Config(ctx, "orders"); err != nil || cfg.Compatibility != "FULL" || cfg.Validation != "strict" {
			t.Fatalf("config read back: %v, %v", cfg, err)
		}
		for name, bad := range map[string]*orderlogpb.SchemaConfig{
			"unknown_level":      {Subject: "orders", Compatibility: "SIDEWAYS", Validation: "warn"},
			"unknown_validation": {Subject: "orders", Compatibility: "NONE", Validation: "loose"},
			"global_validation":  {Validation: "strict"},
			"control_in_subject": {Subject: "a\nb", Validation: "warn"},
		} {
			if _, err := rootReg.SetConfig(ctx, bad); apierr.As(err).Code != apierr.InvalidArgument {
				t.Errorf("%s: %v, want INVALID_ARGUMENT", name, err)
			}
		}
		if cfg, err = alice.Config(ctx, "orders"); err != nil || cfg.Compatibility != "FULL" || cfg.Validation != "strict" {
			t.Fatalf("config after refused changes: %v, %v; want nothing changed", cfg, err)
		}
		if cfg, err = rootReg.Config(ctx, ""); err != nil || cfg.Compatibility != "BACKWARD" || cfg.Validation != "" {
			t.Fatalf("global config: %v, %v", cfg, err)
		}
	})

	t.Run("permission_denied", func(t *testing.T) {
		calls := map[string]func() error{
			"alice registers on orders (read only)": func() error { _, err := alice.Register(ctx, "orders", "AVRO", ordersV2); return err },
			"alice sets orders' config": func() error {
				_, err := alice.SetConfig(ctx, &orderlogpb.SchemaConfig{Subject: "orders", Validation: "none"})
				return err
			},
			"alice reads secret":              func() error { _, err := alice.Get(ctx, "secret", 1); return err },
			"alice checks against secret":     func() error { _, err := alice.Check(ctx, "secret", 0, "JSON", `{}`); return err },
			"alice reads by id (every topic)": func() error { _, err := alice.ByID(ctx, v1.Id); return err },
			"alice reads the global config":   func() error { _, err := alice.Config(ctx, ""); return err },
			"bob sets the global config": func() error {
				_, err := bob.SetConfig(ctx, &orderlogpb.SchemaConfig{Compatibility: "NONE"})
				return err
			},
			"mallory lists orders' versions": func() error { _, err := mallory.Versions(ctx, "orders"); return err },
			"mallory reads orders' config":   func() error { _, err := mallory.Config(ctx, "orders"); return err },
		}
		for what, call := range calls {
			if err := call(); apierr.As(err).Code != apierr.PermissionDenied {
				t.Errorf("%s: %v, want PERMISSION_DENIED", what, err)
			}
		}
		if subjects, err := mallory.Subjects(ctx); err != nil || len(subjects) != 0 {
			t.Errorf("mallory's subjects: %v, %v; want none", subjects, err)
		}
		_, err := orderlogpb.NewSchemasClient(conn).ListSubjects(ctx, &orderlogpb.ListSubjectsRequest{})
		if codeOf(err) != apierr.Unauthenticated {
			t.Errorf("no credentials: %v, want UNAUTHENTICATED", err)
		}
		if got, err := rootReg.Get(ctx, "orders", -1); err != nil || got.Version != 2 {
			t.Errorf("after the refusals: %v, %v; want version 2 still the latest", got, err)
		}
	})
}

// TestSchemasServiceWithoutAuthentication: with authentication off (no
// token or ACL exists) every call is served, as on the REST path.
func TestSchemasServiceWithoutAuthentication(t *testing.T) {
	s := startServer(t, t.TempDir())
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	reg := dial(t, s).Schemas()
	v, err := reg.Register(ctx, "events", "JSON", `{"type":"object","properties":{"n":{"type":"integer"}}}`)
	if err != nil || v.Version != 1 || v.Format != "JSON" {
		t.Fatalf("register: %v, %v", v, err)
	}
	if got, err := reg.ByID(ctx, v.Id); err != nil || got.Text != v.Text {
		t.Fatalf("by id: %v, %v", got, err)
	}
	if cfg, err := reg.SetConfig(ctx, &orderlogpb.SchemaConfig{}); err != nil || cfg.Compatibility != "BACKWARD" {
		t.Fatalf("set nothing globally: %v, %v; want the global level unchanged", cfg, err)
	}
}
