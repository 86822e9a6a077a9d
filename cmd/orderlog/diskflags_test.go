package main

import "testing"

func TestParseDiskShare(t *testing.T) {
	for in, want := range map[string]float64{"0.9": 0.9, "90%": 0.9, "90": 0.9, " 75 % ": 0.75, "1": 1, "100%": 1, "0.5": 0.5} {
		if got, err := parseDiskShare(in); err != nil || got != want {
			t.Errorf("%q: %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "x", "0", "-5%", "101%", "150"} {
		if got, err := parseDiskShare(in); err == nil {
			t.Errorf("%q: %v, want an error", in, got)
		}
	}
}
