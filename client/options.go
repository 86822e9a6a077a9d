package client

import (
	"context"
	"crypto/tls"

	"google.golang.org/grpc/credentials"
)

// Option configures Dial.
type Option func(*options)

// options are what Dial was given.
type options struct {
	// creds secure every connection; nil: plaintext.
	creds credentials.TransportCredentials
	// token is sent with every call ("": none).
	token string
}

// WithTLS makes every connection over TLS with cfg (nil: TLS with Go's
// defaults): cfg.RootCAs verifies the nodes (nil: the system's roots;
// give the cluster's CA), and cfg.Certificates or
// cfg.GetClientCertificate present a client certificate when the
// cluster asks for one. Without WithTLS the client connects in
// plaintext, which a node serving TLS refuses (UNAVAILABLE).
func WithTLS(cfg *tls.Config) Option {
	if cfg == nil {
		cfg = &tls.Config{}
	}
	creds := credentials.NewTLS(cfg)
	return func(o *options) { o.creds = creds }
}

// WithToken sends a bearer token (docs/security.md) with every call. Over
// plaintext the token crosses the network in clear: use it with WithTLS
// beyond one machine.
func WithToken(token string) Option {
	return func(o *options) { o.token = token }
}

// bearer is a token as gRPC per-call credentials.
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

// RequireTransportSecurity is false so that dev's plaintext loopback works
// with tokens too.
func (bearer) RequireTransportSecurity() bool { return false }
