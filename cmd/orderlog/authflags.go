package main

import (
	"flag"
	"fmt"

	"orderlog/internal/node"
)

// authFlags say when the public APIs need credentials (docs/security.md).
type authFlags struct{ mode string }

func (f *authFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.mode, "auth", "auto", "when calls need a token or client certificate: auto (once any token or ACL exists; "+
		"make the first with `orderlog auth token create --principal admin --admin`) or required (always)")
}

func (f *authFlags) apply(cfg *node.Config) error {
	switch f.mode {
	case "auto":
	case "required":
		cfg.Auth.Required = true
	default:
		return fmt.Errorf("--auth %q: use auto or required", f.mode)
	}
	return nil
}
