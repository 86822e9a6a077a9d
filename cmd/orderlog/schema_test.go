package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSchemaCLI runs `orderlog schema` against an `orderlog dev` process:
// register (from a file and from stdin), ls, show by version and by id,
// check (compatible, and not: exit 3 with the reason), config set and get,
// and a refused registration.
func TestSchemaCLI(t *testing.T) {
	srv, _ := startDev(t)
	dir := t.TempDir()
	write := func(name, text string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	v1 := write("v1.avsc", `{"type":"record","name":"Order","fields":[{"name":"id","type":"long"}]}`)
	v2 := `{"type":"record","name":"Order","fields":[{"name":"id","type":"long"},{"name":"note","type":"string","default":""}]}`
	refused := write("refused.avsc", `{"type":"record","name":"Order","fields":[{"name":"id","type":"long"},{"name":"email","type":"string"}]}`)
	schema := func(args ...string) cliRun {
		return runCLI(t, append([]string{"schema"}, append(args, "--addr", srv.grpcAddr)...)...)
	}
	expect := func(what string, run cliRun, fragments ...string) {
		t.Helper()
		out := run.ok(t, what)
		for _, f := range fragments {
			if !strings.Contains(out, f) {
				t.Fatalf("%s: %q, want %q in it", what, out, f)
			}
		}
	}

	expect("register v1", schema("register", "--subject", "orders", "--type", "avro", "--file", v1), "subject orders version 1: schema id 1 (AVRO)")
	run := runCLIInput(t, v2, "schema", "register", "--subject", "orders", "--file", "-", "--json", "--addr", srv.grpcAddr)
	var registered schemaJSON
	if err := json.Unmarshal([]byte(run.ok(t, "register v2 from stdin")), &registered); err != nil ||
		registered.Version != 2 || registered.ID != 2 || registered.SchemaType != "AVRO" {
		t.Fatalf("register v2: %q (%v)", run.stdout, err)
	}
	expect("ls", schema("ls"), "orders\n")
	expect("ls --subject", schema("ls", "--subject", "orders"), "VERSION", "1        1   AVRO", "2        2   AVRO")
	expect("show latest", schema("show", "--subject", "orders"), "subject orders version 2: schema id 2 (AVRO)\n"+v2+"\n")
	expect("show version 1", schema("show", "--subject", "orders", "--version", "1"), `"name":"id"`)
	expect("show --id", schema("show", "--id", "2", "--json"), `"schemaType":"AVRO"`, `\"note\"`)

	expect("check compatible", schema("check", "--subject", "orders", "--file", v1, "--version", "1"), "compatible with subject orders (version 1)")
	run = schema("check", "--subject", "orders", "--file", refused)
	if run.exit != 3 || !strings.Contains(run.stdout, "incompatible: not backward compatible with version 2") ||
		!strings.Contains(run.stdout, "email") || !strings.Contains(run.stderr, "not compatible") {
		t.Fatalf("check incompatible: exit %d\nstdout: %s\nstderr: %s", run.exit, run.stdout, run.stderr)
	}
	run = schema("register", "--subject", "orders", "--file", refused)
	if run.exit != 1 || !strings.Contains(run.stderr, "INCOMPATIBLE_SCHEMA") || !strings.Contains(run.stderr, "email") {
		t.Fatalf("register incompatible: exit %d\nstderr: %s", run.exit, run.stderr)
	}

	expect("config", schema("config", "--subject", "orders"), "subject orders: compatibility BACKWARD, validation none")
	expect("config --validation", schema("config", "--subject", "orders", "--validation", "strict"),
		"subject orders: compatibility BACKWARD, validation strict")
	expect("config --compatibility", schema("config", "--subject", "orders", "--compatibility", "none", "--json"),
		`{"compatibility":"NONE","subject":"orders","validation":"strict"}`)
	expect("config global", schema("config"), "global: compatibility BACKWARD")
	expect("register after NONE", schema("register", "--subject", "orders", "--file", refused), "subject orders version 3")

	if run := schema("show", "--id", "4294967297"); run.exit != 1 || !strings.Contains(run.stderr, "fit 32 bits") {
		t.Fatalf("show --id 2^32+1: exit %d, %s; want refused, not wrapped to id 1", run.exit, run.stderr)
	}
	if run := schema("show"); run.exit == 0 || !strings.Contains(run.stderr, "--subject") {
		t.Fatalf("show without a subject: exit %d, %s", run.exit, run.stderr)
	}
}
