package main

import (
	"context"
	"strings"
	"testing"
	"time"
)

// produceCLI runs `orderlog produce args...` with input on stdin.
func produceCLI(t *testing.T, input string, args ...string) cliRun {
	t.Helper()
	return runCLIInput(t, input, append([]string{"produce"}, args...)...)
}

// TestAuthCommandsGuardAProcess: against an `orderlog dev` process, the
// first administrator is made without credentials; then a client without
// a token is refused, a token's principal may do what its ACLs allow and
// nothing else, and a revoked token stops working.
func TestAuthCommandsGuardAProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a dev process")
	}
	srv, _ := startDev(t)
	defer srv.stop()
	addr := []string{"--addr", srv.grpcAddr}
	cli := func(token string, args ...string) cliRun {
		return runCLI(t, append(append(args, addr...), "--token", token)...)
	}
	admin := strings.TrimSpace(cli("", "auth", "token", "create", "--principal", "admin", "--admin").ok(t, "the first token"))
	if !strings.HasPrefix(admin, "olt_") {
		t.Fatalf("token create printed %q", admin)
	}
	if run := cli("", "status"); run.exit == 0 || !strings.Contains(run.stderr, "UNAUTHENTICATED") {
		t.Fatalf("status without a token: exit %d, %s", run.exit, run.stderr)
	}
	cli(admin, "status").ok(t, "status as admin")
	cli(admin, "topics", "create", "orders").ok(t, "create a topic")
	alice := strings.TrimSpace(cli(admin, "auth", "token", "create", "--principal", "alice").ok(t, "alice's token"))
	cli(admin, "auth", "acl", "add", "--principal", "alice", "--topic", "orders", "--operation", "produce").ok(t, "acl add")
	cli(admin, "auth", "acl", "add", "--principal", "alice", "--topic", "orders", "--operation", "read").ok(t, "acl add")
	if out := cli(admin, "auth", "acl", "ls").ok(t, "acl ls"); strings.Count(out, "alice") != 2 {
		t.Fatalf("acl ls printed %q", out)
	}
	produceCLI(t, "one\ntwo\n", append(addr, "--token", alice, "--topic", "orders")...).ok(t, "alice produces to orders")
	if run := produceCLI(t, "x\n", append(addr, "--token", alice, "--topic", "secret")...); run.exit == 0 || !strings.Contains(run.stderr, "PERMISSION_DENIED") {
		t.Fatalf("alice produces to secret: exit %d, %s", run.exit, run.stderr)
	}
	if run := cli(alice, "read", "--offset", "0"); run.exit == 0 || !strings.Contains(run.stderr, "PERMISSION_DENIED") {
		t.Fatalf("alice reads the whole log: exit %d, %s", run.exit, run.stderr)
	}
	if out := cli(alice, "read", "--offset", "0", "--topic", "orders").ok(t, "alice reads orders"); strings.Count(out, "\n") != 2 {
		t.Fatalf("alice read %q", out)
	}
	if run := cli(alice, "auth", "token", "ls"); run.exit == 0 || !strings.Contains(run.stderr, "PERMISSION_DENIED") {
		t.Fatalf("alice lists tokens: exit %d, %s", run.exit, run.stderr)
	}
	var aliceID string
	for _, line := range strings.Split(cli(admin, "auth", "token", "ls").ok(t, "token ls"), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[1] == "alice" {
			aliceID = f[0]
		}
	}
	cli(admin, "auth", "token", "revoke", aliceID).ok(t, "revoke alice")
	for deadline := time.Now().Add(10 * time.Second); ; {
		run := cli(alice, "status")
		if run.exit != 0 && strings.Contains(run.stderr, "UNAUTHENTICATED") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a revoked token still works: exit %d, %s", run.exit, run.stderr)
		}
	}
}

// TestRequiredAuthStartsLockedAndOpensThroughEtcd: a dev process with
// --auth required refuses every call before any token exists, the Auth
// service included; the first administrator is made through etcd
// (auth token create --etcd), and its token then works.
func TestRequiredAuthStartsLockedAndOpensThroughEtcd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a dev process")
	}
	srv := newDevProcess(t)
	etcdAddr := freeAddr(t)
	srv.cmd = startChild(t, srv.log, "dev", "--data", srv.dataDir, "--grpc-addr", srv.grpcAddr, "--http-addr", srv.httpAddr,
		"--etcd-addr", etcdAddr, "--auth", "required")
	defer srv.stop()
	waitHTTPReady(t, srv)
	addr := []string{"--addr", srv.grpcAddr}
	if run := runCLI(t, append([]string{"status"}, addr...)...); run.exit == 0 || !strings.Contains(run.stderr, "UNAUTHENTICATED") {
		t.Fatalf("status with no token yet: exit %d, %s", run.exit, run.stderr)
	}
	if run := runCLI(t, append([]string{"auth", "token", "create", "--principal", "admin", "--admin"}, addr...)...); run.exit == 0 {
		t.Fatal("the Auth service made a token without credentials under --auth required")
	}
	admin := strings.TrimSpace(runCLI(t, "auth", "token", "create", "--principal", "admin", "--admin", "--etcd", etcdAddr).ok(t, "token create --etcd"))
	runCLI(t, append([]string{"status", "--token", admin}, addr...)...).ok(t, "status with the token made through etcd")
}

// waitHTTPReady waits until the process answers /readyz with 200.
func waitHTTPReady(t *testing.T, srv *serverProcess) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for !httpReady(ctx, srv.httpAddr) {
		select {
		case <-ctx.Done():
			t.Fatalf("not ready; log in %s", srv.log.Name())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
