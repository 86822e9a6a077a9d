package node

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"orderlog/internal/etcdserver"
	"orderlog/internal/tlsconfig"
)

// TLSConfig secures every port of the process: the gRPC and HTTP APIs
// (HTTP/2 on both), the calls it makes to other nodes, and etcd's client
// and peer traffic (the embedded member's, or the connection to an
// external cluster). The zero value is plaintext.
type TLSConfig struct {
	// Config names the node's certificate, its key and the CA that every
	// other node's certificate (and every client certificate offered)
	// must chain to: all three, or none.
	tlsconfig.Config
	// ReloadEvery is how often the files are checked for a change
	// (ReloadTLS reloads them at once: SIGHUP). Default 10 s; negative:
	// never.
	ReloadEvery time.Duration
}

// DefaultTLSReloadEvery is how often a node checks its TLS files.
const DefaultTLSReloadEvery = 10 * time.Second

// validateTLS checks the TLS files and that every etcd URL is of the
// scheme TLS implies: a plaintext http:// URL while TLS is on would
// leave etcd's traffic in clear, and an https:// peer URL without it
// could not be served.
func (c *Config) validateTLS() error {
	if err := c.TLS.ValidateServer(); err != nil {
		return err
	}
	if c.TLS.ReloadEvery == 0 {
		c.TLS.ReloadEvery = DefaultTLSReloadEvery
	}
	on := c.TLS.Enabled()
	for _, endpoint := range c.EtcdEndpoints {
		if on && strings.HasPrefix(endpoint, "http://") {
			return fmt.Errorf("node: etcd endpoint %s is plaintext while TLS is on: use https:// or host:port", endpoint)
		}
	}
	members, err := etcdserver.ParseInitialCluster(c.Member.InitialCluster)
	if err != nil {
		return err
	}
	want, state := "http", "off"
	if on {
		want, state = "https", "on"
	}
	for _, name := range etcdserver.MemberNames(members) {
		if u := members[name]; u.Scheme != want {
			return fmt.Errorf("node: etcd member %s's peer URL %s: want %s:// with TLS %s", name, u.String(), want, state)
		}
	}
	return nil
}

// loadTLS loads the TLS files (nil source without TLS).
func (s *Server) loadTLS() error {
	if !s.cfg.TLS.Enabled() {
		return nil
	}
	var err error
	s.tls, err = tlsconfig.Load(s.cfg.TLS.Config)
	if err != nil {
		return err
	}
	if leaf := s.tls.Certificate(); time.Until(leaf.NotAfter) < 30*24*time.Hour {
		s.logger.Warn("TLS: the node certificate expires soon", "subject", leaf.Subject.String(), "not_after", leaf.NotAfter)
	}
	return nil
}

// watchTLS reloads the TLS files every ReloadEvery until ctx ends.
func (s *Server) watchTLS(ctx context.Context) {
	if s.tls == nil || s.cfg.TLS.ReloadEvery < 0 {
		return
	}
	s.watches.Go(func() {
		s.tls.Watch(ctx, s.cfg.TLS.ReloadEvery, func(leaf *x509.Certificate, err error) {
			s.reportTLSReload(leaf, err)
		})
	})
}

// ReloadTLS reads the TLS files again now (SIGHUP): new connections use
// the new certificate, established ones keep theirs. On an error the
// previous certificate stays in use.
func (s *Server) ReloadTLS() error {
	if s.tls == nil {
		return errors.New("node: TLS is not configured")
	}
	changed, err := s.tls.Reload()
	if changed || err != nil {
		s.reportTLSReload(s.tls.Certificate(), err)
	} else {
		s.logger.Info("TLS: files unchanged")
	}
	return err
}

func (s *Server) reportTLSReload(leaf *x509.Certificate, err error) {
	if err != nil {
		s.logger.Warn("TLS: could not reload the certificate; the previous one stays in use", "err", err)
		return
	}
	s.logger.Info("TLS: reloaded the certificate", "subject", leaf.Subject.String(), "serial", leaf.SerialNumber.Text(16),
		"not_after", leaf.NotAfter)
}

// TLSCertificate is the certificate the node serves now (nil without
// TLS).
func (s *Server) TLSCertificate() *x509.Certificate {
	if s.tls == nil {
		return nil
	}
	return s.tls.Certificate()
}

// peerCredentials are how this node dials other nodes (nil: plaintext).
func (s *Server) peerCredentials() credentials.TransportCredentials {
	if s.tls == nil {
		return nil
	}
	return s.tls.ClientCredentials()
}

// etcdClientTLS is the etcd client's TLS configuration (nil: plaintext).
func (s *Server) etcdClientTLS() *tls.Config {
	if s.tls == nil {
		return nil
	}
	return s.tls.ClientConfig()
}

// tlsServerOptions are the gRPC server's TLS credentials and the check
// that keeps the internal services to other nodes.
func (s *Server) tlsServerOptions() []grpc.ServerOption {
	if s.tls == nil {
		return nil
	}
	return []grpc.ServerOption{
		grpc.Creds(s.tls.ServerCredentials()),
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
			if err := requireNodeCertificate(ctx, info.FullMethod); err != nil {
				return nil, err
			}
			return handler(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
			if err := requireNodeCertificate(ss.Context(), info.FullMethod); err != nil {
				return err
			}
			return handler(srv, ss)
		}),
	}
}

// internalServices are the gRPC services only other nodes call: WAL
// stores, the sequencer's grants and commit map, producer release.
var internalServices = []string{"/orderlog.wal.v1.WAL/", "/orderlog.sequencer.v1.Sequencer/", "/orderlog.ingest.v1.IngestPeer/"}

// errNotANode refuses a call to an internal service without a node
// certificate.
var errNotANode = status.Error(codes.Unauthenticated, "this service is for orderlog nodes: it needs a node certificate")

// requireNodeCertificate lets a call to an internal service through only
// with a node certificate: one the handshake verified against the CA
// (any other was refused there) that may also serve (server
// authentication usage), which client certificates should not have.
func requireNodeCertificate(ctx context.Context, method string) error {
	if !slices.ContainsFunc(internalServices, func(prefix string) bool { return strings.HasPrefix(method, prefix) }) {
		return nil
	}
	p, ok := peer.FromContext(ctx)
	if !ok {
		return errNotANode
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.VerifiedChains) == 0 || !mayServe(info.State.VerifiedChains[0][0]) {
		return errNotANode
	}
	return nil
}

// mayServe says whether a certificate's extended key usages allow server
// authentication (none listed allows any).
func mayServe(cert *x509.Certificate) bool {
	return len(cert.ExtKeyUsage) == 0 || slices.ContainsFunc(cert.ExtKeyUsage, func(u x509.ExtKeyUsage) bool {
		return u == x509.ExtKeyUsageServerAuth || u == x509.ExtKeyUsageAny
	})
}

// warnPlaintext logs a warning for each address the node listens on
// beyond loopback without TLS: anyone who reaches it reads and writes the
// log.
func (s *Server) warnPlaintext() {
	if s.tls != nil {
		return
	}
	addrs := map[string]string{"grpc": s.GRPCAddr(), "http": s.HTTPAddr()}
	if s.etcd != nil {
		addrs["etcd"] = s.cfg.EtcdAddr
		addrs["etcd_peer"] = s.etcd.PeerAddr()
	}
	for _, name := range []string{"grpc", "http", "etcd", "etcd_peer"} {
		if addr, ok := addrs[name]; ok && !loopback(addr) {
			s.logger.Warn("listening beyond loopback without TLS: anyone who reaches this address can read and write the log (--tls-cert, --tls-key, --tls-ca)",
				"port", name, "addr", addr)
		}
	}
}

// loopback says whether addr (host:port) listens on loopback only.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// serveHTTP serves the HTTP API on its listener in the background, over
// TLS (HTTP/2 and HTTP/1.1) when the node has certificates. Failed
// handshakes (a plaintext client, a refused certificate) are logged at
// debug level: anyone who reaches the port can make them.
func (s *Server) serveHTTP() {
	if s.tls == nil {
		go s.http.Serve(s.httpLis)
		return
	}
	s.http.TLSConfig = s.tls.ServerConfig(tlsconfig.HTTPProtocols)
	s.http.ErrorLog = slog.NewLogLogger(s.logger.Handler(), slog.LevelDebug)
	go s.http.ServeTLS(s.httpLis, "", "")
}
