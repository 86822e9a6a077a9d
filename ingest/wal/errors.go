package wal

import (
	"errors"
	"fmt"
)

var (
	// ErrFenced is returned by an ordinary append to a fenced or closed
	// ledger, and by a recovery append to a closed one.
	ErrFenced = errors.New("wal: ledger fenced or closed")
	// ErrBeyondClose is returned by a recovery append of an entry beyond the
	// last entry of a closed ledger.
	ErrBeyondClose = errors.New("wal: entry beyond the closed ledger's last entry")
	// ErrDamaged is returned by an ordinary append to a ledger that
	// damage in the journal may have held entries of (a tainted ledger):
	// the store cannot answer for its tail any more.
	ErrDamaged = errors.New("wal: ledger may have lost entries to journal damage")
	// ErrLedgerDeleted is returned by any write to a ledger that was deleted.
	ErrLedgerDeleted = errors.New("wal: ledger deleted")
	// ErrStoreFailed is returned (wrapping the cause) by every append and
	// fence after a write or fsync failed, until the store is reopened: the
	// data on disk is not known to be what the store wrote.
	ErrStoreFailed = errors.New("wal: store failed, reopen it")
	// ErrClosed is returned by operations on a closed Store.
	ErrClosed = errors.New("wal: store closed")
	// ErrInvalidEntry is returned for negative entry ids and oversized
	// payloads.
	ErrInvalidEntry = errors.New("wal: invalid entry")
	// ErrLocked is returned by Open when another Store, in this or another
	// process, has the directory open.
	ErrLocked = errors.New("wal: directory already open")
)

// GapError is returned by an append whose entry id is not the ledger's next.
type GapError struct {
	Ledger uint64
	Entry  int64
	// Next is the entry id the ledger expects.
	Next int64
}

func (e *GapError) Error() string {
	return fmt.Sprintf("wal: ledger %d: entry %d leaves a gap, next is %d", e.Ledger, e.Entry, e.Next)
}

// ConflictError is returned by a re-append of an existing entry whose span
// or payload differs from what the store holds.
type ConflictError struct {
	Ledger uint64
	Entry  int64
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("wal: ledger %d: entry %d already held with different bytes", e.Ledger, e.Entry)
}

// CorruptionError reports a damaged stretch of the journal that is not a
// torn tail. Ledger and Entry are what the damaged record claims (unverified)
// when Attributed is true.
type CorruptionError struct {
	Segment    string
	Offset     int64
	Length     int64
	Ledger     uint64
	Entry      int64
	Attributed bool
	Err        error
}

func (e *CorruptionError) Error() string {
	if e.Attributed {
		return fmt.Sprintf("wal: corrupt record in %s at offset %d (%d bytes, claims ledger %d entry %d): %v",
			e.Segment, e.Offset, e.Length, e.Ledger, e.Entry, e.Err)
	}
	return fmt.Sprintf("wal: corrupt data in %s at offset %d (%d bytes): %v", e.Segment, e.Offset, e.Length, e.Err)
}

func (e *CorruptionError) Unwrap() error { return e.Err }
