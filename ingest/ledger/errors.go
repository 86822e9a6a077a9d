package ledger

import (
	"errors"
	"fmt"
)

var (
	// ErrStaleEpoch is returned by Create when keys.SeqEpoch no longer holds
	// the epoch the caller asked for: no ledger of an old epoch is created.
	ErrStaleEpoch = errors.New("ledger: sequencer epoch changed")
	// ErrWriterGone is returned by Create when the writer's liveness key
	// (keys.Ingest(incarnation) by default) does not exist, for example
	// because its etcd lease was revoked.
	ErrWriterGone = errors.New("ledger: writer liveness key missing")
	// ErrNotFound is returned when a ledger's metadata key does not exist.
	ErrNotFound = errors.New("ledger: no such ledger")
	// ErrTooFewStores is returned by Create when the ensemble has fewer
	// stores than the ack quorum A: no entry could ever be confirmed.
	ErrTooFewStores = errors.New("ledger: fewer live stores than the ack quorum")
	// ErrBadConfig is wrapped by every configuration validation failure.
	ErrBadConfig = errors.New("ledger: invalid configuration")
	// ErrFenced is returned by Writer operations once a store answered that
	// the ledger is fenced or closed: someone else is recovering it. The
	// writer must Close (which then waits for the recovered metadata).
	ErrFenced = errors.New("ledger: writer fenced")
	// ErrQuorumLost is returned by Writer operations when fewer than A stores
	// of the ensemble can still take writes. The caller closes the ledger and
	// creates a new one on a new ensemble.
	ErrQuorumLost = errors.New("ledger: fewer than A stores reachable")
	// ErrClosed is returned by Append after Close started.
	ErrClosed = errors.New("ledger: writer closed")
	// ErrNotClosed is returned by OpenReader for a ledger that is not closed
	// when the caller did not give a confirmed bound.
	ErrNotClosed = errors.New("ledger: ledger not closed")
	// ErrBeyondLast is returned by Reader for an entry beyond the readable
	// bound (the closed ledger's last entry or the caller's confirmed bound).
	ErrBeyondLast = errors.New("ledger: entry beyond the last readable entry")
	// ErrUnreadable is returned by Reader when no ensemble member answered
	// PRESENT for an entry that must exist.
	ErrUnreadable = errors.New("ledger: no store could serve the entry")
	// ErrSpanOrder is returned by Append when a non-empty span starts before
	// the end of the previous non-empty span of the ledger.
	ErrSpanOrder = errors.New("ledger: span out of order")
)

// StateError is returned when a ledger is not in the state an operation
// needs (for example Close of a ledger someone else already closed with a
// different outcome, or a CAS that lost to another actor).
type StateError struct {
	LedgerID uint64
	Want     State
	Got      State
}

func (e *StateError) Error() string {
	return fmt.Sprintf("ledger %d: state %s, want %s", e.LedgerID, e.Got, e.Want)
}

// RecoveryIncompleteError is returned by Recover when it could not conclude
// before its context ended: an entry had neither a holder nor W-A+1 explicit
// ABSENT answers (UNKNOWN answers or unreachable stores), or the fence quorum
// was not reached. The ledger stays in state recovering; recovering again later
// is safe.
type RecoveryIncompleteError struct {
	LedgerID uint64
	Entry    int64 // entry being decided, or -1 during fencing
	Reason   string
	Err      error
}

func (e *RecoveryIncompleteError) Error() string {
	return fmt.Sprintf("ledger %d: recovery incomplete at entry %d: %s: %v", e.LedgerID, e.Entry, e.Reason, e.Err)
}

func (e *RecoveryIncompleteError) Unwrap() error { return e.Err }
