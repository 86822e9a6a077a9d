package ledger

import "fmt"

// Replication is the write quorum W (ensemble size) and ack quorum A of a
// ledger, validated against the number of store failures it must tolerate.
type Replication struct {
	// W is the number of stores every entry is written to (the ensemble size).
	W int
	// A is the number of store acks that confirm an entry.
	A int
	// Tolerate is f, the number of store failures the user asks to survive.
	// W = A = 1 with Tolerate = 0 is accepted and is single-machine only.
	Tolerate int
}

// SingleMachine reports whether this is the W = A = 1 configuration, which
// survives no store failure and is meant only for `orderlog dev`.
func (r Replication) SingleMachine() bool { return r.W == 1 && r.A == 1 }

// Validate checks A ≥ f+1 (a confirmed entry survives f lost disks) and
// W ≥ 2f+1 (after f stores fail, A stores can still ack and W−A+1 can still
// be fenced). It also rejects A > W.
func (r Replication) Validate() error {
	switch {
	case r.W < 1 || r.A < 1:
		return fmt.Errorf("%w: W=%d A=%d must be at least 1", ErrBadConfig, r.W, r.A)
	case r.A > r.W:
		return fmt.Errorf("%w: A=%d larger than W=%d", ErrBadConfig, r.A, r.W)
	case r.Tolerate < 0:
		return fmt.Errorf("%w: negative failures to tolerate", ErrBadConfig)
	case r.A < r.Tolerate+1:
		return fmt.Errorf("%w: A=%d must be ≥ f+1=%d", ErrBadConfig, r.A, r.Tolerate+1)
	case r.W < 2*r.Tolerate+1:
		return fmt.Errorf("%w: W=%d must be ≥ 2f+1=%d", ErrBadConfig, r.W, 2*r.Tolerate+1)
	}
	return nil
}

// String labels the configuration; W=A=1 is marked single-machine only.
func (r Replication) String() string {
	if r.SingleMachine() {
		return "W=1 A=1 (single-machine only: no store failure tolerated)"
	}
	return fmt.Sprintf("W=%d A=%d f=%d", r.W, r.A, r.Tolerate)
}

// fenceQuorum is W−A+1: once that many stores are fenced, at most A−1 stores
// can still ack the writer, so it can never confirm another entry. The same
// number of explicit ABSENT answers proves an entry was never confirmed.
func fenceQuorum(w, a int) int { return w - a + 1 }
