package ledger

import (
	"errors"
	"strings"
	"testing"
)

func TestReplicationValidate(t *testing.T) {
	cases := map[string]struct {
		r  Replication
		ok bool
	}{
		"single_machine":       {Replication{W: 1, A: 1, Tolerate: 0}, true},
		"three_two_one":        {Replication{W: 3, A: 2, Tolerate: 1}, true},
		"five_three_two":       {Replication{W: 5, A: 3, Tolerate: 2}, true},
		"ack_quorum_too_small": {Replication{W: 3, A: 1, Tolerate: 1}, false},
		"ensemble_too_small":   {Replication{W: 2, A: 2, Tolerate: 1}, false},
		"ack_above_write":      {Replication{W: 3, A: 4, Tolerate: 0}, false},
		"zero":                 {Replication{}, false},
		"negative_f":           {Replication{W: 1, A: 1, Tolerate: -1}, false},
		"five_three_three":     {Replication{W: 5, A: 3, Tolerate: 3}, false},
	}
	for name, c := range cases {
		err := c.r.Validate()
		if (err == nil) != c.ok {
			t.Errorf("%s: Validate() = %v, want ok=%v", name, err, c.ok)
		}
		if err != nil && !errors.Is(err, ErrBadConfig) {
			t.Errorf("%s: %v does not wrap ErrBadConfig", name, err)
		}
	}
}

func TestSingleMachineLabelled(t *testing.T) {
	if s := (Replication{W: 1, A: 1}).String(); !strings.Contains(s, "single-machine only") {
		t.Fatalf("W=A=1 label %q", s)
	}
	if s := (Replication{W: 3, A: 2, Tolerate: 1}).String(); strings.Contains(s, "single") {
		t.Fatalf("W=3 label %q", s)
	}
}
