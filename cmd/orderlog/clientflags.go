package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"orderlog/client"
	"orderlog/internal/tlsconfig"
)

// clientFlags are the flags every client verb takes, defined here once.
type clientFlags struct {
	addr    endpointList
	timeout time.Duration
	// tls is on with --tls or any of the files.
	tls   bool
	files tlsconfig.Config
	// token is sent with every call (--token, else $ORDERLOG_TOKEN).
	token string
}

// defaultEndpoint is where the client verbs look for a node by default:
// `orderlog dev` and node 0 of `orderlog node`.
const defaultEndpoint = "127.0.0.1:7070"

func (c *clientFlags) register(fs *flag.FlagSet) {
	c.addr = endpointList(defaultEndpoint)
	fs.Var(&c.addr, "addr", "gRPC address of an orderlog node, or a comma-separated list (`host:port,...`); "+
		"calls move to the next node when one fails, and the client learns the cluster's other nodes from it")
	fs.DurationVar(&c.timeout, "timeout", 0, "give up after this long (0 = no limit)")
	fs.BoolVar(&c.tls, "tls", false, "connect over TLS, trusting the system's CAs unless --tls-ca names one (implied by --tls-ca and --tls-cert)")
	fs.StringVar(&c.files.CAFile, "tls-ca", "", "PEM CA certificate(s) the nodes' certificates must chain to (TLS on)")
	fs.StringVar(&c.files.CertFile, "tls-cert", "", "PEM client certificate to present to the nodes, with --tls-key (TLS on)")
	fs.StringVar(&c.files.KeyFile, "tls-key", "", "PEM private key of --tls-cert")
	fs.StringVar(&c.token, "token", os.Getenv("ORDERLOG_TOKEN"), "bearer token to authenticate with (default $ORDERLOG_TOKEN; see orderlog auth --help)")
}

// options are the client options the flags ask for.
func (c *clientFlags) options() ([]client.Option, error) {
	var opts []client.Option
	if c.token != "" {
		opts = append(opts, client.WithToken(c.token))
	}
	if !c.tls && !c.files.Enabled() {
		return opts, nil
	}
	source, err := tlsconfig.Load(c.files)
	if err != nil {
		return nil, err
	}
	return append(opts, client.WithTLS(source.ClientConfig())), nil
}

// dial connects to --addr as the flags say.
func (c *clientFlags) dial() (*client.Client, error) {
	opts, err := c.options()
	if err != nil {
		return nil, err
	}
	return client.Dial(string(c.addr), opts...)
}

// withClient connects and runs fn with a context that ends on Ctrl-C,
// SIGTERM or after --timeout.
func (c *clientFlags) withClient(fn func(ctx context.Context, cl *client.Client) error) error {
	cl, err := c.dial()
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	if c.timeout > 0 {
		var cancelTimeout context.CancelFunc
		ctx, cancelTimeout = context.WithTimeout(ctx, c.timeout)
		defer cancelTimeout()
	}
	return c.hintTLS(fn(ctx, cl))
}

// hintTLS adds a hint to the error of a plaintext connection that a TLS
// node closed (gRPC's "error reading server preface"), which says nothing
// of TLS itself.
func (c *clientFlags) hintTLS(err error) error {
	if err == nil || c.tls || c.files.Enabled() || !strings.Contains(err.Error(), "server preface") {
		return err
	}
	return fmt.Errorf("%w (does the node serve TLS? connect with --tls-ca)", err)
}

// endpointList is a flag.Value holding a list of node addresses, checked
// when the flag is parsed.
type endpointList string

func (l *endpointList) String() string { return string(*l) }

func (l *endpointList) Set(value string) error {
	if _, err := client.ParseEndpoints(value); err != nil {
		return err
	}
	*l = endpointList(value)
	return nil
}
