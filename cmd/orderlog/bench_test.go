package main

import (
	"strings"
	"testing"
)

// TestBenchRefusesLoadsThatCannotRun: flag values that panicked the load
// generator (a zero frame, a negative size) or measured nothing (no
// streams) are refused before anything connects.
func TestBenchRefusesLoadsThatCannotRun(t *testing.T) {
	for _, args := range [][]string{
		{"--frame", "0", "--count", "100"},
		{"--size", "-1"},
		{"--streams", "0"},
		{"--inflight", "0"},
		{"--count", "0", "--duration", "0s"},
	} {
		err := runBench(append(args, "--addr", "127.0.0.1:1"))
		if err == nil || !strings.HasPrefix(err.Error(), "load:") {
			t.Errorf("bench %v: %v, want a load: error", args, err)
		}
	}
}
