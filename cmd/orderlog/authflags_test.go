package main

import (
	"flag"
	"io"
	"testing"

	"orderlog/internal/node"
)

// TestLimitFlags: the limits default to the node's defaults, -1 turns one
// off, and 0 or less than -1 is refused rather than taken for "default".
func TestLimitFlags(t *testing.T) {
	parse := func(args ...string) (node.Config, error) {
		fs := flag.NewFlagSet("dev", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		var f authFlags
		f.register(fs)
		var cfg node.Config
		if err := fs.Parse(args); err != nil {
			return cfg, err
		}
		return cfg, f.apply(&cfg)
	}
	cfg, err := parse()
	want := node.Limits{StreamsPerPrincipal: node.DefaultStreamsPerPrincipal,
		ConnectionsPerAddress: node.DefaultConnectionsPerAddress, ProducersPerPrincipal: node.DefaultProducersPerPrincipal}
	if err != nil || cfg.Limits != want {
		t.Fatalf("defaults: %+v, %v; want %+v", cfg.Limits, err, want)
	}
	cfg, err = parse("--max-streams-per-principal", "8", "--max-connections-per-address", "-1", "--max-producers-per-principal", "3")
	if want := (node.Limits{StreamsPerPrincipal: 8, ConnectionsPerAddress: -1, ProducersPerPrincipal: 3}); err != nil || cfg.Limits != want {
		t.Fatalf("set: %+v, %v; want %+v", cfg.Limits, err, want)
	}
	for _, bad := range []string{"0", "-2"} {
		if _, err := parse("--max-streams-per-principal", bad); err == nil {
			t.Errorf("--max-streams-per-principal %s was taken", bad)
		}
	}
}
