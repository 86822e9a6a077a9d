// Package duckcheck runs check.mjs, beside this file, for tests: DuckDB
// (through its Node API, installed by `make duckdb-tool`) reading archive
// files as an independent Parquet reader. Only tests import it.
package duckcheck

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// Run runs `node check.mjs args...` and decodes its JSON into out.
// Without node or its modules it fails, saying how to install them, unless
// ORDERLOG_ALLOW_NO_DUCKDB=1, which skips.
func Run(t testing.TB, out any, args ...string) {
	t.Helper()
	_, self, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("duckcheck: cannot find check.mjs")
	}
	dir := filepath.Dir(self)
	_, modErr := os.Stat(filepath.Join(dir, "node_modules", "@duckdb", "node-api"))
	_, nodeErr := exec.LookPath("node")
	if modErr != nil || nodeErr != nil {
		if os.Getenv("ORDERLOG_ALLOW_NO_DUCKDB") == "1" {
			t.Skip("DuckDB check skipped (ORDERLOG_ALLOW_NO_DUCKDB=1)")
		}
		t.Fatalf("DuckDB check needs node and %s/node_modules: run `make duckdb-tool` "+
			"(or set ORDERLOG_ALLOW_NO_DUCKDB=1 to skip): %v %v", dir, modErr, nodeErr)
	}
	cmd := exec.Command("node", append([]string{"check.mjs"}, args...)...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	if err != nil {
		t.Fatalf("node check.mjs: %v\n%s", err, stderr.String())
	}
	if err := json.Unmarshal(stdout, out); err != nil {
		t.Fatalf("check.mjs output: %v\n%s", err, stdout)
	}
}
