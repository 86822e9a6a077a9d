package tlsconfig

import (
	"context"
	"crypto/tls"
	"errors"
	"net"

	"google.golang.org/grpc/credentials"
)

// ALPN protocols: gRPC speaks HTTP/2 only; the HTTP API both.
var (
	GRPCProtocols = []string{"h2"}
	HTTPProtocols = []string{"h2", "http/1.1"}
)

// ServerConfig is the tls.Config of a server announcing protocols (ALPN).
// Each handshake takes the current generation: its certificate and, with
// a CA, its client verification — a client may come without a
// certificate, but one that offers a certificate not chaining to the CA
// is refused during the handshake.
func (s *Source) ServerConfig(protocols []string) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: protocols,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return s.current.Load().server(protocols)
		},
	}
}

func (m *material) server(protocols []string) (*tls.Config, error) {
	if m.cert == nil {
		return nil, errors.New("tlsconfig: no server certificate")
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: protocols, Certificates: []tls.Certificate{*m.cert}}
	if m.roots != nil {
		cfg.ClientCAs, cfg.ClientAuth = m.roots, tls.VerifyClientCertIfGiven
	}
	return cfg, nil
}

// ClientConfig is the tls.Config of a client of the current generation:
// it verifies servers against the CA (the system's roots without one) and
// presents the certificate, when there is one, as it is at each
// handshake. The CA is the one loaded now: a client made with it needs a
// new config to trust a new CA (etcd clients, whose tls.Config is fixed
// when they are made).
func (s *Source) ClientConfig() *tls.Config {
	cfg := s.current.Load().client()
	cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		if cert := s.current.Load().cert; cert != nil {
			return cert, nil
		}
		return &tls.Certificate{}, nil // none: the server decides
	}
	return cfg
}

func (m *material) client() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: m.roots}
}

// ServerCredentials are the gRPC transport credentials of a server
// (ServerConfig with gRPC's protocol).
func (s *Source) ServerCredentials() credentials.TransportCredentials {
	return credentials.NewTLS(s.ServerConfig(GRPCProtocols))
}

// ClientCredentials are the gRPC transport credentials of a client: each
// connection is made with the current generation, CA included.
func (s *Source) ClientCredentials() credentials.TransportCredentials {
	return clientCredentials{source: s}
}

// clientCredentials makes each handshake with gRPC's TLS credentials for
// the current generation.
type clientCredentials struct{ source *Source }

func (c clientCredentials) current() credentials.TransportCredentials {
	m := c.source.current.Load()
	cfg := m.client()
	if m.cert != nil {
		cfg.Certificates = []tls.Certificate{*m.cert}
	}
	return credentials.NewTLS(cfg)
}

func (c clientCredentials) ClientHandshake(ctx context.Context, authority string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return c.current().ClientHandshake(ctx, authority, conn)
}

func (c clientCredentials) ServerHandshake(net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("tlsconfig: client credentials cannot serve")
}

func (c clientCredentials) Info() credentials.ProtocolInfo { return c.current().Info() }

func (c clientCredentials) Clone() credentials.TransportCredentials { return c }

// OverrideServerName is gRPC's deprecated hook; the authority of each
// connection names the server.
func (c clientCredentials) OverrideServerName(string) error { return nil }
