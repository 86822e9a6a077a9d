package main

import (
	"flag"
	"fmt"

	"orderlog/internal/node"
)

// authFlags say when the public APIs need credentials, and what one
// principal or address may hold open (docs/security.md).
type authFlags struct {
	mode   string
	limits node.Limits
}

func (f *authFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.mode, "auth", "auto", "when calls need a token or client certificate: auto (once any token or ACL exists; "+
		"make the first with `orderlog auth token create --principal admin --admin`) or required (always)")
	fs.IntVar(&f.limits.StreamsPerPrincipal, "max-streams-per-principal", node.DefaultStreamsPerPrincipal,
		"open gRPC and HTTP consumer streams one principal may hold on this node; more are refused with LIMIT_EXCEEDED (-1: no limit)")
	fs.IntVar(&f.limits.ConnectionsPerAddress, "max-connections-per-address", node.DefaultConnectionsPerAddress,
		"TCP connections one remote IP address may hold open to the gRPC and HTTP ports together; more are closed when accepted (-1: no limit)")
	fs.IntVar(&f.limits.ProducersPerPrincipal, "max-producers-per-principal", node.DefaultProducersPerPrincipal,
		"producer sessions one principal may hold on this node; InitProducer of one more is refused with LIMIT_EXCEEDED (-1: no limit)")
}

func (f *authFlags) apply(cfg *node.Config) error {
	switch f.mode {
	case "auto":
	case "required":
		cfg.Auth.Required = true
	default:
		return fmt.Errorf("--auth %q: use auto or required", f.mode)
	}
	for name, v := range map[string]int{"max-streams-per-principal": f.limits.StreamsPerPrincipal,
		"max-connections-per-address": f.limits.ConnectionsPerAddress, "max-producers-per-principal": f.limits.ProducersPerPrincipal} {
		if v == 0 || v < -1 {
			return fmt.Errorf("--%s %d: want a positive number, or -1 for no limit", name, v)
		}
	}
	cfg.Limits = f.limits
	return nil
}
