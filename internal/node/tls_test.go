package node

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"orderlog/client"
	"orderlog/ingest"
	"orderlog/internal/etcdserver"
	"orderlog/internal/grpcopt"
	"orderlog/internal/keys"
	"orderlog/internal/tlsconfig"
	"orderlog/proto/orderlogpb"
	"orderlog/proto/walpb"
)

// testPKI is a CA and the files of the certificates it issued, in a
// test's temporary directory.
type testPKI struct {
	t      *testing.T
	ca     *tlsconfig.CA
	dir    string
	caFile string
}

func newTestPKI(t *testing.T, name string) *testPKI {
	t.Helper()
	ca, err := tlsconfig.NewCA(name, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	p := &testPKI{t: t, ca: ca, dir: t.TempDir()}
	p.caFile = filepath.Join(p.dir, "ca.pem")
	if err := os.WriteFile(p.caFile, ca.CertPEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// node issues a node certificate for loopback and returns the node's TLS
// configuration (checked for changes every 50 ms).
func (p *testPKI) node(name string) TLSConfig {
	files := p.issue(name, []string{"127.0.0.1", "localhost"})
	return TLSConfig{Config: files, ReloadEvery: 50 * time.Millisecond}
}

// issue writes a certificate for hosts and its key, with this CA as the
// CA file.
func (p *testPKI) issue(name string, hosts []string) tlsconfig.Config {
	p.t.Helper()
	certPEM, keyPEM, err := p.ca.Issue(name, hosts, time.Now())
	if err != nil {
		p.t.Fatal(err)
	}
	files := tlsconfig.Config{CertFile: filepath.Join(p.dir, name+".pem"), KeyFile: filepath.Join(p.dir, name+"-key.pem"), CAFile: p.caFile}
	writeSwapped(p.t, files.KeyFile, keyPEM)
	writeSwapped(p.t, files.CertFile, certPEM)
	return files
}

// writeSwapped replaces path's contents at once (a rename).
func writeSwapped(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path+".tmp", data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}

func (p *testPKI) pool() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(p.ca.Cert)
	return pool
}

// clientTLS trusts p and presents the certificate in files, if any.
func (p *testPKI) clientTLS(files tlsconfig.Config) *tls.Config {
	p.t.Helper()
	cfg := &tls.Config{RootCAs: p.pool()}
	if files.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(files.CertFile, files.KeyFile)
		if err != nil {
			p.t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg
}

// startTLSServer runs a whole orderlog in-process with TLS on every port.
func startTLSServer(t *testing.T, pki *testPKI) *Server {
	t.Helper()
	s := startServerWith(t, Config{DataDir: t.TempDir(), TLS: pki.node("node")})
	t.Cleanup(s.Close)
	return s
}

// callInitProducer calls InitProducer at addr over a connection made with
// creds and returns its error.
func callInitProducer(t *testing.T, addr string, creds credentials.TransportCredentials) error {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpcopt.DialOptionsWith(creds)...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = orderlogpb.NewProducerClient(conn).InitProducer(ctx, &orderlogpb.InitProducerRequest{Name: "intruder"})
	return err
}

// httpsClient speaks HTTP/2 or HTTP/1.1 over TLS with cfg.
func httpsClient(t *testing.T, cfg *tls.Config) *http.Client {
	tr := &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// produced counts the producer names registered in etcd.
func producerNames(t *testing.T, s *Server) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := s.cli.Get(ctx, keys.ProducerNamesPrefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return resp.Count
}

// TestTLSRoundTripAndRefusals runs orderlog with TLS on every port: a
// client trusting its CA produces and reads over gRPC and HTTP/2; a
// plaintext client, and a client whose certificate another CA issued, are
// refused on both ports (UNAVAILABLE: no connection is made; 400 from
// the HTTP server to plaintext) and write nothing; a client certificate
// from the right CA does not open the internal services, which need a
// node certificate (UNAUTHENTICATED). The server serves on throughout.
func TestTLSRoundTripAndRefusals(t *testing.T) {
	pki := newTestPKI(t, "orderlog test CA")
	s := startTLSServer(t, pki)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := client.Dial(s.GRPCAddr(), client.WithTLS(pki.clientTLS(tlsconfig.Config{})))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p, err := c.NewProducer(ctx, "app", client.ProducerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.Produce(ctx, msg("t", "", "over TLS")); err != nil {
		t.Fatal(err)
	}
	names := producerNames(t, s)

	other := newTestPKI(t, "another CA")
	rogue := other.issue("rogue", []string{"127.0.0.1"})
	// It trusts the server; the server must not trust it. It offers its
	// certificate whatever CAs the server names, as curl does (Go's
	// Certificates would offer none, and be served as a client without).
	rogueTLS := pki.clientTLS(rogue)
	rogueCert := rogueTLS.Certificates[0]
	rogueTLS.Certificates, rogueTLS.GetClientCertificate = nil, func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &rogueCert, nil }
	clientOnly := pki.issueClientOnly("client")
	for name, tc := range map[string]struct {
		creds credentials.TransportCredentials
		want  codes.Code
	}{
		"plaintext":             {nil, codes.Unavailable},
		"other_CA_certificate":  {credentials.NewTLS(rogueTLS), codes.Unavailable},
		"untrusted_server":      {credentials.NewTLS(&tls.Config{}), codes.Unavailable},
		"right_CA_certificate":  {credentials.NewTLS(pki.clientTLS(clientOnly)), codes.OK},
		"no_client_certificate": {credentials.NewTLS(pki.clientTLS(tlsconfig.Config{})), codes.OK},
	} {
		if got := status.Code(callInitProducer(t, s.GRPCAddr(), tc.creds)); got != tc.want {
			t.Errorf("%s: InitProducer answered %v, want %v", name, got, tc.want)
		}
	}
	if got := producerNames(t, s); got != names+1 { // "intruder", registered by the two clients let in
		t.Fatalf("%d producer names after the refused calls, want %d", got, names+1)
	}

	// The internal services: a client certificate is not a node's.
	for name, files := range map[string]tlsconfig.Config{"no_certificate": {}, "client_certificate": clientOnly} {
		conn, err := grpc.NewClient(s.GRPCAddr(), grpcopt.DialOptionsWith(credentials.NewTLS(pki.clientTLS(files)))...)
		if err != nil {
			t.Fatal(err)
		}
		_, err = walpb.NewWALClient(conn).Info(ctx, &walpb.InfoRequest{})
		conn.Close()
		if status.Code(err) != codes.Unauthenticated {
			t.Errorf("WAL Info with %s: %v, want UNAUTHENTICATED", name, err)
		}
	}

	// HTTP: plaintext gets 400, another CA's certificate no handshake,
	// the CA's clients HTTP/2.
	resp, err := http.Get("http://" + s.HTTPAddr() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("plaintext HTTP: %d %s, want 400", resp.StatusCode, body)
	}
	http.DefaultClient.CloseIdleConnections()
	if resp, err := httpsClient(t, rogueTLS).Post("https://"+s.HTTPAddr()+"/v1/producers", "application/json", strings.NewReader(`{"name":"rogue"}`)); err == nil {
		resp.Body.Close()
		t.Errorf("HTTPS with another CA's certificate: %s, want a refused handshake", resp.Status)
	}
	resp, err = httpsClient(t, pki.clientTLS(tlsconfig.Config{})).Get("https://" + s.HTTPAddr() + "/v1/status")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 {
		t.Errorf("HTTPS status: %s over %s, want 200 over HTTP/2", resp.Status, resp.Proto)
	}
	if got := producerNames(t, s); got != names+1 {
		t.Fatalf("%d producer names after the refused HTTP calls, want %d", got, names+1)
	}

	// Healthy: the producer logs on, and the log holds its messages only.
	acks, err := p.Produce(ctx, msg("t", "", "after the refusals"))
	if err != nil {
		t.Fatal(err)
	}
	waitCommitted(t, c, acks[0].Offset+1)
	got, _ := readAll(t, c)
	if fmt.Sprint(values(got)) != "[0:over TLS 1:after the refusals]" {
		t.Fatalf("read over TLS: %v", values(got))
	}
}

// issueClientOnly writes a certificate usable by clients only (no server
// usage), as client certificates should be.
func (p *testPKI) issueClientOnly(name string) tlsconfig.Config {
	p.t.Helper()
	certPEM, keyPEM, err := p.ca.IssueClient(name, time.Now())
	if err != nil {
		p.t.Fatal(err)
	}
	files := tlsconfig.Config{CertFile: filepath.Join(p.dir, name+".pem"), KeyFile: filepath.Join(p.dir, name+"-key.pem"), CAFile: p.caFile}
	writeSwapped(p.t, files.KeyFile, keyPEM)
	writeSwapped(p.t, files.CertFile, certPEM)
	return files
}

// servedSerial is the serial number of the certificate addr serves.
func servedSerial(t *testing.T, addr string, cfg *tls.Config) string {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.Text(16)
}

// TestTLSReloadServesTheNewCertificate swaps the node's certificate and
// key files: the gRPC and HTTP ports serve the new certificate without a
// restart (the watch notices the change; ReloadTLS, SIGHUP's, answers
// that nothing changed since), and a client connection made before the
// swap goes on working.
func TestTLSReloadServesTheNewCertificate(t *testing.T) {
	pki := newTestPKI(t, "orderlog test CA")
	s := startTLSServer(t, pki)
	cfg := pki.clientTLS(tlsconfig.Config{})
	cfg.NextProtos = []string{"h2"}
	old := servedSerial(t, s.GRPCAddr(), cfg)
	if want := s.TLSCertificate().SerialNumber.Text(16); old != want {
		t.Fatalf("served %s, loaded %s", old, want)
	}
	c, err := client.Dial(s.GRPCAddr(), client.WithTLS(pki.clientTLS(tlsconfig.Config{})))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.Status(ctx); err != nil {
		t.Fatal(err)
	}

	pki.node("node") // new certificate and key, same files
	fresh := ""
	for fresh == "" || fresh == old {
		if ctx.Err() != nil {
			t.Fatalf("still serving %s after the files changed", old)
		}
		time.Sleep(20 * time.Millisecond)
		fresh = servedSerial(t, s.GRPCAddr(), cfg)
	}
	if want := s.TLSCertificate().SerialNumber.Text(16); fresh != want {
		t.Fatalf("gRPC serves %s, loaded %s", fresh, want)
	}
	if got := servedSerial(t, s.HTTPAddr(), pki.clientTLS(tlsconfig.Config{})); got != fresh {
		t.Fatalf("HTTP serves %s, gRPC %s", got, fresh)
	}
	if err := s.ReloadTLS(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Status(ctx); err != nil {
		t.Fatalf("a connection made before the swap: %v", err)
	}
}

// TestTLSClusterOverMTLS runs the roles of a cluster as separate nodes,
// each with its own certificate, on an etcd that serves TLS and asks
// clients for certificates: ledgers replicate W=3/A=2 between the stores,
// grants and the commit map cross nodes, and a reader node serves what
// two ingest nodes took — every byte between them over mTLS.
func TestTLSClusterOverMTLS(t *testing.T) {
	pki := newTestPKI(t, "orderlog test CA")
	etcd, err := etcdserver.Start(etcdserver.Config{Dir: t.TempDir(), TLS: pki.issue("etcd", []string{"127.0.0.1"})})
	if err != nil {
		t.Fatal(err)
	}
	defer etcd.Close()
	if !strings.HasPrefix(etcd.Endpoint(), "https://") {
		t.Fatalf("etcd endpoint %s", etcd.Endpoint())
	}
	n := 0
	start := func(roles Roles) *Server {
		n++
		return startTestNode(t, etcd, Config{Roles: roles, TLS: pki.node(fmt.Sprintf("node%d", n)),
			Ingest: ingest.Config{W: 3, A: 2, Tolerate: 1}, Commit: Replication{W: 3, A: 2, Tolerate: 1}})
	}
	var ingests []*Server
	for range 3 {
		s := start(Roles{Ingest: true})
		defer s.Close()
		ingests = append(ingests, s)
	}
	seq := start(Roles{Sequencer: true})
	defer seq.Close()
	rd := start(Roles{Reader: true})
	defer rd.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	waitAllReady(t, ctx, append(ingests, rd)...)
	dialTLS := func(s *Server) *client.Client {
		c, err := client.Dial(s.GRPCAddr(), client.WithTLS(pki.clientTLS(tlsconfig.Config{})))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	var last uint64
	for i, s := range ingests[:2] {
		p, err := dialTLS(s).NewProducer(ctx, fmt.Sprintf("app-%d", i), client.ProducerOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for j := range 5 {
			acks, err := p.Produce(ctx, msg("t", "", fmt.Sprintf("%d-%d", i, j)))
			if err != nil {
				t.Fatal(err)
			}
			last = max(last, acks[0].Offset)
		}
		p.Close()
	}
	rc := dialTLS(rd)
	waitCommitted(t, rc, last+1)
	if got, _ := readAll(t, rc); len(got) != 10 {
		t.Fatalf("reader node read %v", values(got))
	}
}

// TestTLSNodeWithAWrongPeerCertificateCannotJoin: a node whose etcd
// member presents a certificate from another CA tries to join a running
// TLS cluster, listed with member add first (as a learner, as etcd
// advises for a new member: a voting member added to a one-member cluster
// would halve its quorum until it joined). The running member refuses its
// peer connections: the node does not start, says why, and nothing of it
// reaches etcd (the member never publishes its name, no store of its
// registers); the cluster serves on.
func TestTLSNodeWithAWrongPeerCertificateCannotJoin(t *testing.T) {
	pki := newTestPKI(t, "orderlog test CA")
	peerA, peerC := freeLoopbackAddr(t), freeLoopbackAddr(t)
	founders := "a=https://" + peerA
	a := startServerWith(t, Config{DataDir: t.TempDir(), NodeName: "a", TLS: pki.node("a"), Member: EtcdMember{InitialCluster: founders}})
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := a.cli.MemberAddAsLearner(ctx, []string{"https://" + peerC}); err != nil {
		t.Fatal(err)
	}
	stores := func() int64 {
		resp, err := a.cli.Get(ctx, keys.StoresPrefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		return resp.Count
	}
	before := stores()

	rogue := newTestPKI(t, "another CA").node("c")
	rogue.CAFile = pki.caFile // c trusts the cluster; the cluster must not trust c
	began := time.Now()
	c, err := Start(Config{DataDir: t.TempDir(), NodeName: "c", TLS: rogue, GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0",
		Logger: testLogger(t), Member: EtcdMember{InitialCluster: founders + ",c=https://" + peerC, ClusterState: etcdserver.StateExisting}})
	if err == nil {
		c.Close()
		t.Fatal("a node with another CA's certificate joined the cluster")
	}
	if !strings.Contains(err.Error(), "certificate") {
		t.Errorf("the refused node says %q, not that its certificate was refused", err)
	}
	t.Logf("refused in %v: %v", time.Since(began).Round(time.Millisecond), err)
	members, err := a.cli.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range members.Members {
		if m.Name == "c" || (m.Name == "" && len(m.ClientURLs) > 0) {
			t.Fatalf("member %+v started", m)
		}
	}
	if after := stores(); after != before {
		t.Fatalf("%d stores registered, %d before the attempt", after, before)
	}
	cl, err := client.Dial(a.GRPCAddr(), client.WithTLS(pki.clientTLS(tlsconfig.Config{})))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	p, err := cl.NewProducer(ctx, "app", client.ProducerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.Produce(ctx, msg("t", "", "after the attempt")); err != nil {
		t.Fatalf("the running node after the refused join: %v", err)
	}
}

func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestPlaintextBeyondLoopbackWarns: a node listening on every interface
// without TLS says so at start; on loopback it does not.
func TestPlaintextBeyondLoopbackWarns(t *testing.T) {
	var mu sync.Mutex
	var warnings []string
	logger := slog.New(slog.NewTextHandler(lineWriter(func(line string) {
		if strings.Contains(line, "without TLS") {
			mu.Lock()
			warnings = append(warnings, line)
			mu.Unlock()
		}
	}), nil))
	for _, tc := range []struct {
		addr string
		want int
	}{{"127.0.0.1:0", 0}, {"0.0.0.0:0", 2}} { // gRPC and HTTP
		mu.Lock()
		warnings = nil
		mu.Unlock()
		s, err := Start(Config{DataDir: t.TempDir(), GRPCAddr: tc.addr, HTTPAddr: tc.addr, Logger: logger})
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
		mu.Lock()
		got := warnings
		mu.Unlock()
		if len(got) != tc.want {
			t.Errorf("listening on %s: %d warnings %q, want %d", tc.addr, len(got), got, tc.want)
		}
	}
}

func TestTLSConfigValidation(t *testing.T) {
	files := tlsconfig.Config{CertFile: "c", KeyFile: "k", CAFile: "ca"}
	for name, tc := range map[string]struct {
		cfg     Config
		refused string
	}{
		"no_CA":              {Config{TLS: TLSConfig{Config: tlsconfig.Config{CertFile: "c", KeyFile: "k"}}}, "needs a certificate, its key and a CA"},
		"plaintext_etcd":     {Config{TLS: TLSConfig{Config: files}, EtcdEndpoints: []string{"http://e:2379"}}, "plaintext while TLS is on"},
		"http_peer_with_TLS": {Config{TLS: TLSConfig{Config: files}, NodeName: "n1", Member: EtcdMember{InitialCluster: "n1=http://127.0.0.1:1"}}, "want https://"},
		"https_peer_no_TLS":  {Config{NodeName: "n1", Member: EtcdMember{InitialCluster: "n1=https://127.0.0.1:1"}}, "want http://"},
	} {
		tc.cfg.DataDir = t.TempDir()
		if err := tc.cfg.Validate(); err == nil || !strings.Contains(err.Error(), tc.refused) {
			t.Errorf("%s: Validate = %v, want %q", name, err, tc.refused)
		}
	}
	ok := Config{DataDir: t.TempDir(), TLS: TLSConfig{Config: files}, EtcdEndpoints: []string{"https://e:2379", "e2:2379"}, Roles: Roles{Reader: true}}
	if err := ok.Validate(); err != nil || ok.TLS.ReloadEvery != DefaultTLSReloadEvery {
		t.Fatalf("Validate = %v, reload every %v", err, ok.TLS.ReloadEvery)
	}
}
