package main

import (
	"context"
	"flag"
	"os"
	"os/signal"
	"syscall"
	"time"

	"orderlog/client"
)

// clientFlags are the flags every client verb takes, defined here once.
type clientFlags struct {
	addr    endpointList
	timeout time.Duration
}

// defaultEndpoint is where the client verbs look for a node by default:
// `orderlog dev` and node 0 of `orderlog node`.
const defaultEndpoint = "127.0.0.1:7070"

func (c *clientFlags) register(fs *flag.FlagSet) {
	c.addr = endpointList(defaultEndpoint)
	fs.Var(&c.addr, "addr", "gRPC address of an orderlog node, or a comma-separated list (`host:port,...`); "+
		"calls move to the next node when one fails, and the client learns the cluster's other nodes from it")
	fs.DurationVar(&c.timeout, "timeout", 0, "give up after this long (0 = no limit)")
}

// withClient connects and runs fn with a context that ends on Ctrl-C,
// SIGTERM or after --timeout.
func (c *clientFlags) withClient(fn func(ctx context.Context, cl *client.Client) error) error {
	cl, err := client.Dial(string(c.addr))
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
	return fn(ctx, cl)
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
