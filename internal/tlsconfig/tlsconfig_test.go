package tlsconfig

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var now = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

// issueTo writes a certificate for 127.0.0.1 from ca, its key and ca's
// certificate under dir, and returns their configuration.
func issueTo(t *testing.T, ca *CA, dir string) Config {
	t.Helper()
	certPEM, keyPEM, err := ca.Issue("test", []string{"127.0.0.1", "localhost"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{CertFile: filepath.Join(dir, "cert.pem"), KeyFile: filepath.Join(dir, "key.pem"), CAFile: filepath.Join(dir, "ca.pem")}
	if err := writeFiles(cfg.CertFile, certPEM, cfg.KeyFile, keyPEM); err != nil {
		t.Fatal(err)
	}
	if err := writeAtomic(cfg.CAFile, ca.CertPEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	return cfg
}

func newCA(t *testing.T, name string) *CA {
	t.Helper()
	ca, err := NewCA(name, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// serve accepts TLS connections with cfg until the test ends, completing
// each handshake and echoing nothing.
func serve(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	lis, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	go func() {
		for {
			conn, err := lis.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				if conn.(*tls.Conn).Handshake() == nil {
					_, _ = io.WriteString(conn, "ok")
				}
			}()
		}
	}()
	return lis.Addr().String()
}

// served dials addr with client and returns the server's certificate, or
// the error of the handshake or of the first read (TLS 1.3 tells a client
// that its certificate was refused only then).
func served(addr string, client *tls.Config) (*x509.Certificate, error) {
	conn, err := tls.Dial("tcp", addr, client)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if _, err := io.ReadAll(conn); err != nil {
		return nil, err
	}
	return conn.ConnectionState().PeerCertificates[0], nil
}

func TestReloadSwapsTheServedCertificate(t *testing.T) {
	ca := newCA(t, "ca")
	dir := t.TempDir()
	src, err := Load(issueTo(t, ca, dir))
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, src.ServerConfig(HTTPProtocols))
	client := src.ClientConfig()
	first, err := served(addr, client)
	if err != nil || first.SerialNumber.Cmp(src.Certificate().SerialNumber) != 0 {
		t.Fatalf("served %v, %v; want serial %v", first, err, src.Certificate().SerialNumber)
	}
	if changed, err := src.Reload(); changed || err != nil {
		t.Fatalf("reload of unchanged files: changed %v, %v", changed, err)
	}

	issueTo(t, ca, dir)
	if changed, err := src.Reload(); !changed || err != nil {
		t.Fatalf("reload of new files: changed %v, %v", changed, err)
	}
	second, err := served(addr, client)
	if err != nil || second.SerialNumber.Cmp(first.SerialNumber) == 0 || second.SerialNumber.Cmp(src.Certificate().SerialNumber) != 0 {
		t.Fatalf("after the reload served %v, %v; want serial %v", second, err, src.Certificate().SerialNumber)
	}
}

// TestAFailedReloadKeepsTheCertificate: a certificate written before its
// key does not load; the old pair stays served, and the failure counts as
// repeated until the files change again.
func TestAFailedReloadKeepsTheCertificate(t *testing.T) {
	ca := newCA(t, "ca")
	dir := t.TempDir()
	cfg := issueTo(t, ca, dir)
	src, err := Load(cfg)
	if err != nil {
		t.Fatal(err)
	}
	old := src.Certificate().SerialNumber
	oldKey, _ := os.ReadFile(cfg.KeyFile)
	newCert, _, _ := ca.Issue("test", []string{"127.0.0.1"}, time.Now())
	if err := writeFiles(cfg.CertFile, newCert, cfg.KeyFile, oldKey); err != nil {
		t.Fatal(err)
	}
	if changed, err, repeated := src.reload(); changed || err == nil || repeated {
		t.Fatalf("mismatched key: changed %v, %v, repeated %v", changed, err, repeated)
	}
	if _, err, repeated := src.reload(); err == nil || !repeated {
		t.Fatalf("the same mismatch again: %v, repeated %v", err, repeated)
	}
	if src.Certificate().SerialNumber.Cmp(old) != 0 {
		t.Fatal("a failed reload replaced the certificate")
	}
}

// TestServerVerifiesOfferedClientCertificates: a client without a
// certificate is served, one whose certificate another CA issued is
// refused during the handshake.
func TestServerVerifiesOfferedClientCertificates(t *testing.T) {
	ca, other := newCA(t, "ca"), newCA(t, "other")
	src, err := Load(issueTo(t, ca, t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, src.ServerConfig(HTTPProtocols))
	anonymous, err := Load(Config{CAFile: src.Config().CAFile})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := served(addr, anonymous.ClientConfig()); err != nil {
		t.Fatalf("client without a certificate: %v", err)
	}
	rogueFiles := issueTo(t, other, t.TempDir())
	rogueFiles.CAFile = src.Config().CAFile // it trusts the server; the server must not trust it
	rogue, err := Load(rogueFiles)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := served(addr, rogue.ClientConfig()); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("client certificate from another CA: %v, want a refused certificate", err)
	}
	if _, err := served(addr, (&tls.Config{})); err == nil {
		t.Fatal("a client trusting only the system's roots accepted the orderlog CA's certificate")
	}
}

func TestEnsureDevReusesItsFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tls")
	hosts := []string{"127.0.0.1", "localhost"}
	d, created, err := EnsureDev(dir, hosts, now)
	if err != nil || len(created) != 6 {
		t.Fatalf("first EnsureDev: created %v, %v", created, err)
	}
	node, err := Load(d.Node())
	if err != nil {
		t.Fatal(err)
	}
	if err := node.Certificate().VerifyHostname("127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	if info, _ := os.Stat(d.NodeKey); info.Mode().Perm() != 0o600 {
		t.Fatalf("node key mode %v", info.Mode())
	}
	if _, created, err := EnsureDev(dir, hosts, now.Add(time.Hour)); err != nil || len(created) != 0 {
		t.Fatalf("second EnsureDev: created %v, %v", created, err)
	}
	// A new host, or a certificate about to expire, is issued again.
	if _, created, err := EnsureDev(dir, append(hosts, "10.1.2.3"), now); err != nil || len(created) != 2 || created[0] != d.NodeCert {
		t.Fatalf("EnsureDev with a new host: created %v, %v", created, err)
	}
	if _, created, err := EnsureDev(dir, hosts, now.Add(CertValidity-time.Hour)); err != nil || len(created) != 4 {
		t.Fatalf("EnsureDev near expiry: created %v, %v", created, err)
	}
}

func TestValidate(t *testing.T) {
	for _, c := range []struct {
		cfg            Config
		server, client bool
	}{
		{Config{}, true, true},
		{Config{CertFile: "c", KeyFile: "k", CAFile: "ca"}, true, true},
		{Config{CertFile: "c", KeyFile: "k"}, false, true},
		{Config{CAFile: "ca"}, false, true},
		{Config{CertFile: "c", CAFile: "ca"}, false, false},
	} {
		if got := c.cfg.ValidateServer() == nil; got != c.server {
			t.Errorf("%+v ValidateServer ok = %v", c.cfg, got)
		}
		if got := c.cfg.ValidateClient() == nil; got != c.client {
			t.Errorf("%+v ValidateClient ok = %v", c.cfg, got)
		}
	}
}
