package main

import (
	"context"
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"orderlog/internal/tlsconfig"
)

// TestDevTLS runs `orderlog dev --tls`: it writes a CA and certificates
// into its data directory and serves TLS; the client verbs connect with
// --tls-ca, --tls-cert and --tls-key and are refused without them; a
// SIGHUP after the node certificate changed serves the new one at once;
// a restart reuses the files.
func TestDevTLS(t *testing.T) {
	srv := newDevProcess(t)
	start := func() {
		srv.cmd = startChild(t, srv.log, "dev", "--tls", "--data", srv.dataDir, "--grpc-addr", srv.grpcAddr,
			"--http-addr", srv.httpAddr, "--etcd-addr", "127.0.0.1:0")
	}
	start()
	dev := tlsconfig.DevFiles(filepath.Join(srv.dataDir, "tls"))
	cf := clientFlags{addr: endpointList(srv.grpcAddr), files: dev.Client()}
	waitForFile(t, dev.ClientCert) // the last written
	c, err := cf.dial()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	srv.waitReady(c)
	tlsArgs := []string{"--tls-ca", dev.CA, "--tls-cert", dev.ClientCert, "--tls-key", dev.ClientKey}
	input := filepath.Join(t.TempDir(), "lines")
	if err := os.WriteFile(input, []byte("one\ntwo\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := runProduce(append(append([]string{"--addr", srv.grpcAddr, "--topic", "t", "--timeout", "20s"}, tlsArgs...), input)); err != nil {
		t.Fatalf("produce over TLS: %v", err)
	}
	err = runProduce([]string{"--addr", srv.grpcAddr, "--topic", "t", "--timeout", "3s", input})
	if err == nil || !strings.Contains(err.Error(), "UNAVAILABLE") {
		t.Fatalf("produce in plaintext to a TLS node: %v, want UNAVAILABLE", err)
	}

	// A new node certificate (one more host), then SIGHUP: served within
	// a second, well before the 10 s file check would notice.
	served := func() string {
		source, err := tlsconfig.Load(dev.Client())
		if err != nil {
			t.Fatal(err)
		}
		cfg := source.ClientConfig()
		cfg.NextProtos = tlsconfig.GRPCProtocols
		conn, err := tls.Dial("tcp", srv.grpcAddr, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber.String()
	}
	before := served()
	if _, created, err := tlsconfig.EnsureDev(dev.Dir, append(devTLSHosts(srv.grpcAddr), "10.9.8.7"), time.Now()); err != nil || len(created) != 2 {
		t.Fatalf("reissue the node certificate: %v, %v", created, err)
	}
	if err := srv.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Second)
	for served() == before {
		if time.Now().After(deadline) {
			t.Fatal("the old certificate is still served a second after SIGHUP")
		}
		time.Sleep(20 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Status(ctx); err != nil {
		t.Fatalf("after the reload: %v", err)
	}

	ca, _ := os.ReadFile(dev.CA)
	srv.stop()
	if code := srv.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("dev --tls exited %d", code)
	}
	start()
	srv.waitReady(c)
	if again, _ := os.ReadFile(dev.CA); string(again) != string(ca) {
		t.Fatal("a restart made a new CA")
	}
	if err := runProduce(append(append([]string{"--addr", srv.grpcAddr, "--topic", "t", "--timeout", "20s"}, tlsArgs...), input)); err != nil {
		t.Fatalf("produce after the restart: %v", err)
	}
	srv.stop()
	raw, _ := os.ReadFile(srv.log.Name())
	if n := strings.Count(string(raw), "wrote "); n != 6 {
		t.Fatalf("%d files written over two starts, want the 6 of the first:\n%s", n, raw)
	}
}

// waitForFile waits until path exists (a child process writes it).
func waitForFile(t *testing.T, path string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s was not written", path)
		}
	}
}
