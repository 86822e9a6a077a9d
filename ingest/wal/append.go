package wal

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
)

// Entry is one ledger entry as a writer appends it.
type Entry struct {
	Ledger uint64
	ID     int64
	Span   Span
	// LAC is the writer's last add confirmed, piggybacked; -1 if none.
	LAC     int64
	Payload []byte
}

// Ticket is the outcome of an asynchronous append.
type Ticket struct {
	b   *batch
	err error
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Done is closed when the outcome is known.
func (t *Ticket) Done() <-chan struct{} {
	if t.b == nil {
		return closedChan
	}
	return t.b.done
}

// Wait blocks until the append is durable (nil) or has failed.
func (t *Ticket) Wait() error {
	if t.err != nil || t.b == nil {
		return t.err
	}
	<-t.b.done
	return t.b.err
}

// Append appends e and returns once it is durable. An existing entry with
// identical span and payload succeeds without a new record. Errors:
// ErrFenced, *GapError, *ConflictError, ErrLedgerDeleted, ErrInvalidEntry,
// ErrStoreFailed, ErrClosed.
func (s *Store) Append(e Entry) error { return s.AppendAsync(e, false).Wait() }

// RecoveryAppend is Append for recovery's roll-forward: allowed on a fenced
// ledger, and on a closed one up to its last entry.
func (s *Store) RecoveryAppend(e Entry) error { return s.AppendAsync(e, true).Wait() }

// AppendAsync starts an append. Appends are applied in call order; their
// tickets complete in that order. The payload is copied before it returns.
// Above the disk's hard mark an append that would create the ledger here
// fails with a *DiskFullError.
func (s *Store) AppendAsync(e Entry, recovery bool) *Ticket { return s.appendAsync(e, recovery, false) }

// appendAsync is AppendAsync; remote says the append comes from another
// node's writer, which above the disk's hard mark is refused for every
// ordinary append: only this node's ingest knows to stop accepting
// messages (disk.go).
func (s *Store) appendAsync(e Entry, recovery, remote bool) *Ticket {
	if len(e.Payload) > MaxPayload {
		return &Ticket{err: fmt.Errorf("%w: payload of %d bytes", ErrInvalidEntry, len(e.Payload))}
	}
	r := Record{Type: RecordEntry, Ledger: e.Ledger, Entry: e.ID, Span: e.Span, LAC: e.LAC, Payload: e.Payload}
	var header [RecordHeaderSize]byte
	if keys := s.cfg.Keys; keys != nil {
		// Sealed outside the lock, like the checksum, into a pooled buffer
		// the payload is copied out of under it.
		r.Flags, r.Payload = flagEncrypted, nil // the header's bytes [8, 52) are the additional data
		sealed := getSealBuffer(len(e.Payload) + sealedOverhead)
		defer putSealBuffer(sealed)
		r.Payload = keys.seal(*sealed, appendRecordHeader(header[:0], &r), e.Payload)
		*sealed = r.Payload
	}
	framed := appendRecordHeader(header[:0], &r)
	for {
		s.mu.Lock()
		for s.mu.pendingBytes > s.cfg.MaxPendingBytes && s.usableLocked() == nil {
			s.space.Wait()
		}
		if err := s.usableLocked(); err != nil {
			s.mu.Unlock()
			return &Ticket{err: err}
		}
		verdict, err := s.mu.idx.checkAppend(e.Ledger, e.ID, recovery)
		if err != nil {
			s.mu.Unlock()
			return &Ticket{err: err}
		}
		if verdict == verdictWrite {
			if err := s.diskRefusalLocked(e.Ledger, recovery, remote); err != nil {
				s.mu.Unlock()
				return &Ticket{err: err}
			}
			if recovery && s.mu.idx.ledgers[e.Ledger] == nil {
				// A recovery's copy to a ledger this store has no record
				// of: journal the fence it implies first, so that the
				// ledger is created by a fence, here and on replay, and is
				// tainted while the journal holds damage the store cannot
				// attribute (its earlier entries may have been in it).
				s.enqueueLocked(&Record{Type: RecordFence, Ledger: e.Ledger, Entry: -1, LAC: -1})
			}
			_, b := s.enqueueFramedLocked(&r, framed)
			s.mu.Unlock()
			return &Ticket{b: b}
		}
		pos := s.mu.idx.ledgers[e.Ledger].entries[e.ID]
		if pos.durableAt(s.mu.durable) {
			s.mu.Unlock()
			return &Ticket{err: s.compareExisting(e, pos)}
		}
		// The entry is still being written: wait for it, then compare.
		wait := s.mu.pending
		if wait == nil {
			wait = s.mu.inflight
		}
		s.mu.Unlock()
		if wait != nil {
			<-wait.done
		}
	}
}

// diskRefusalLocked says why the hard mark refuses to write an entry, or
// nil. Recovery appends to a ledger the store holds (a roll-forward of its
// tail) go through: a recovery must be able to finish.
func (s *Store) diskRefusalLocked(ledger uint64, recovery, remote bool) error {
	if s.mu.idx.ledgers[ledger] != nil && (recovery || !remote) {
		return nil
	}
	return s.disk.refusal()
}

// compareExisting succeeds if the record at pos holds e's span and payload.
func (s *Store) compareExisting(e Entry, pos position) error {
	r, err := s.readRecord(pos)
	if err != nil {
		return err
	}
	if r.Type != RecordEntry || r.Ledger != e.Ledger || r.Entry != e.ID || r.Span != e.Span || !bytes.Equal(r.Payload, e.Payload) {
		return &ConflictError{Ledger: e.Ledger, Entry: e.ID}
	}
	return nil
}

// LedgerState is what a fence reports.
type LedgerState struct {
	// Status is Present when Last and LAC are exact for this incarnation,
	// Unknown when the ledger was written by an older incarnation or
	// damaged bytes may have held its entries.
	Status Status
	Last   int64
	LAC    int64
}

// Fence marks the ledger fenced, durably, and returns its last entry and
// the highest LAC piggybacked on its entries. Fencing an unknown ledger
// creates it, fenced and empty.
func (s *Store) Fence(ledger uint64) (LedgerState, error) {
	s.mu.Lock()
	if err := s.writableLocked(ledger); err != nil {
		s.mu.Unlock()
		return LedgerState{}, err
	}
	lac := int64(-1)
	if l := s.mu.idx.ledgers[ledger]; l != nil {
		lac = l.lac
	}
	_, b := s.enqueueLocked(&Record{Type: RecordFence, Ledger: ledger, Entry: -1, LAC: lac})
	b.sync = true
	l := s.mu.idx.ledgers[ledger]
	st := LedgerState{Status: Present, Last: l.last(), LAC: l.lac}
	if s.trustLocked(l) == Unknown {
		st.Status = Unknown
	}
	s.mu.Unlock()
	if err := (&Ticket{b: b}).Wait(); err != nil {
		return LedgerState{}, err
	}
	return st, nil
}

// CloseLedger closes the ledger at last, durably: entries beyond last are dropped
// and never served, ordinary appends fail with ErrFenced.
func (s *Store) CloseLedger(ledger uint64, last int64) error {
	if last < -1 {
		return ErrInvalidEntry
	}
	s.mu.Lock()
	if err := s.writableLocked(ledger); err != nil {
		s.mu.Unlock()
		return err
	}
	_, b := s.enqueueLocked(&Record{Type: RecordClose, Ledger: ledger, Entry: last, LAC: -1})
	b.sync = true
	s.mu.Unlock()
	return (&Ticket{b: b}).Wait()
}

// Delete deletes the ledger durably; later reads answer UNKNOWN. Segments
// that no live ledger has records in any more are removed.
func (s *Store) Delete(ledger uint64) error {
	s.mu.Lock()
	if err := s.usableLocked(); err != nil {
		s.mu.Unlock()
		return err
	}
	if _, gone := s.mu.idx.deleted[ledger]; gone {
		s.mu.Unlock()
		return nil
	}
	if l := s.mu.idx.ledgers[ledger]; l != nil {
		if s.mu.deleting == nil {
			s.mu.deleting = map[uint64][]uint32{}
		}
		s.mu.deleting[ledger] = slices.Clone(l.segs)
	}
	_, b := s.enqueueLocked(&Record{Type: RecordDelete, Ledger: ledger, Entry: -1, LAC: -1})
	b.sync = true
	s.mu.Unlock()
	if err := (&Ticket{b: b}).Wait(); err != nil {
		return err // a failed store removes nothing any more
	}
	s.mu.Lock()
	delete(s.mu.deleting, ledger)
	s.mu.Unlock()
	err := s.removeDeadSegments()
	s.disk.sample() // writes resume as soon as the space is free, not a period later
	return err
}

func (s *Store) writableLocked(ledger uint64) error {
	if err := s.usableLocked(); err != nil {
		return err
	}
	if _, gone := s.mu.idx.deleted[ledger]; gone {
		return ErrLedgerDeleted
	}
	return nil
}

// removeDeadSegments removes the segments no live ledger has a record in
// (index.deadSegments), but only segments older than the newest
// checkpointed one, whose checkpoint carries every deletion made before it
// (deletedMetasLocked): a removed delete record must not let older records
// of its ledger come back.
func (s *Store) removeDeadSegments() error {
	s.mu.Lock()
	if len(s.mu.segments) < 2 {
		s.mu.Unlock()
		return nil
	}
	// The newest sealed segment's checkpoint may still be on its way
	// (releaseLoop); removal waits for it rather than keep segments it
	// could remove.
	for newestSealed := s.mu.segments[len(s.mu.segments)-2]; s.mu.checkpointed < newestSealed && s.mu.failed == nil; {
		s.checkpoints.Wait()
	}
	if s.mu.failed != nil {
		s.mu.Unlock()
		return nil
	}
	stillLive := map[uint32]bool{} // segments of deletes not yet durable
	for _, segs := range s.mu.deleting {
		for _, seg := range segs {
			stillLive[seg] = true
		}
	}
	dead := s.mu.idx.deadSegments(s.mu.segments, s.mu.checkpointed, stillLive)
	s.mu.segments = slices.DeleteFunc(s.mu.segments, func(seq uint32) bool { return slices.Contains(dead, seq) })
	for _, seq := range dead {
		if f := s.mu.readers[seq]; f != nil {
			f.Close()
			delete(s.mu.readers, seq)
		}
		s.unmapLocked(seq) // leases on it keep it mapped until released
	}
	s.mu.Unlock()
	if len(dead) == 0 {
		return nil
	}
	for _, seq := range dead {
		if err := s.fs.Remove(s.path(indexName(seq))); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("wal: remove index: %w", err)
		}
		if err := s.fs.Remove(s.path(segmentName(seq))); err != nil {
			return fmt.Errorf("wal: remove segment: %w", err)
		}
	}
	return s.fs.SyncDir(s.dir)
}

// Ledgers lists the live ledgers, ascending.
func (s *Store) Ledgers() []uint64 {
	s.mu.Lock()
	ids := make([]uint64, 0, len(s.mu.idx.ledgers))
	for id := range s.mu.idx.ledgers {
		ids = append(ids, id)
	}
	s.mu.Unlock()
	slices.Sort(ids)
	return ids
}

// Seal buffers are pooled like batch buffers: the sealed payload lives
// only until enqueueFramedLocked has copied it into the batch.
var sealBuffers sync.Pool

func getSealBuffer(size int) *[]byte {
	if b, ok := sealBuffers.Get().(*[]byte); ok && cap(*b) >= size {
		*b = (*b)[:0]
		return b
	}
	b := make([]byte, 0, max(size, 4<<10))
	return &b
}

func putSealBuffer(b *[]byte) {
	if cap(*b) > 4<<20 {
		return // do not pin huge buffers
	}
	sealBuffers.Put(b)
}
