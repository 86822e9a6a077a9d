package main

import "testing"

func TestParseByteSize(t *testing.T) {
	for in, want := range map[string]int64{"1048576": 1 << 20, "1GiB": 1 << 30, "64 MiB": 64 << 20, "1.5KiB": 1536, "2GB": 2e9, "0": 0} {
		if got, err := parseByteSize(in); err != nil || got != want {
			t.Errorf("%q: %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "GiB", "-1MiB", "ten"} {
		if _, err := parseByteSize(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
