package wal

import (
	"errors"
	"fmt"
	"runtime/debug"
	"sync/atomic"

	"orderlog/ingest/wal/walfs"
)

// Reads in place. Borrow serves an entry of a sealed segment straight from
// a read-only mapping of the segment file (walfs.Mapper), checked as Read
// checks it, without the copy into a fresh buffer that Read makes (with
// pread, a third of a node's CPU during a range read). The mapping's life:
//
//   - a segment is mapped the first time an entry of it is borrowed, once
//     the journal's durable point has passed it: its bytes never change
//     again (only Open truncates a torn tail, before anything is served);
//   - the store holds one reference to a mapping while the segment is one
//     of its own, and every Lease one more; removeDeadSegments and Close
//     drop the store's, and the last reference unmaps. A removed segment
//     file stays readable through a mapping made before its removal, so a
//     reader holding a lease when retention deletes the ledger keeps valid
//     bytes until it releases;
//   - a filesystem without mappings (the tests' CrashFS and ErrorFS), the
//     active segment, a failed mapping and a sealed (encrypted) payload go
//     the way Read goes, with a nil Lease.

// segmentMap is one mapped sealed segment.
type segmentMap struct {
	mapping walfs.Mapping
	data    []byte
	// refs: the store's own while the segment is in Store.mu.maps, plus
	// one per unreleased Lease. Zero unmaps.
	refs atomic.Int64
}

func (m *segmentMap) acquire() { m.refs.Add(1) }

func (m *segmentMap) release() {
	switch n := m.refs.Add(-1); {
	case n == 0:
		_ = m.mapping.Close()
	case n < 0:
		panic("wal: segment mapping released more often than acquired")
	}
}

// Lease keeps the mapped bytes a borrowed payload aliases valid until
// Release. A nil Lease (the payload is a fresh copy) is valid and releases
// nothing.
type Lease struct {
	m atomic.Pointer[segmentMap]
}

// Release gives the bytes back; the payload must not be touched after it.
// A second Release does nothing.
func (l *Lease) Release() {
	if l == nil {
		return
	}
	if m := l.m.Swap(nil); m != nil {
		m.release()
	}
}

// Borrowed reports whether the lease holds a mapping (false: nil, released,
// or the payload was copied).
func (l *Lease) Borrowed() bool { return l != nil && l.m.Load() != nil }

// Borrow is Read without the copy where it can be avoided: Payload may
// alias a read-only mapping of the entry's sealed segment, valid until the
// returned Lease is released (it must be, also when Status is not
// Present; Release of a nil Lease does nothing). The payload's checksum is
// verified on every call, as Read verifies it. Payload must never be
// written.
func (s *Store) Borrow(ledger uint64, entry int64) (ReadResult, *Lease) {
	s.mu.Lock()
	status, pos := s.lookupLocked(ledger, entry)
	var m *segmentMap
	if status == Present {
		m = s.mappingLocked(pos.seg)
	}
	s.mu.Unlock()
	if status != Present {
		return ReadResult{Status: status}, nil
	}
	if m == nil {
		return s.readAt(ledger, entry, pos), nil
	}
	r, err := m.record(pos)
	if err != nil || r.Flags&flagEncrypted != 0 || r.Type != RecordEntry || r.Ledger != ledger || r.Entry != entry {
		// Damage, a fault, or a sealed payload: Read's way reports it
		// (or decrypts it into fresh memory) exactly as Read does.
		m.release()
		return s.readAt(ledger, entry, pos), nil
	}
	l := &Lease{}
	l.m.Store(m)
	return ReadResult{Status: Present, Span: r.Span, LAC: r.LAC, Payload: r.Payload}, l
}

// errMappedFault: touching the mapping faulted (the file shrank under it,
// or the disk failed a page-in). Borrow then reads with pread, which
// answers with the I/O error instead.
var errMappedFault = errors.New("wal: fault reading a mapped segment")

// record decodes and verifies the record at pos from the mapping. A fault
// while the checksum touches every byte becomes errMappedFault rather than
// a crash.
func (m *segmentMap) record(pos position) (r Record, err error) {
	end := uint64(pos.off) + uint64(pos.size)
	if end > uint64(len(m.data)) {
		return Record{}, fmt.Errorf("wal: record [%d, %d) beyond the mapped %d bytes", pos.off, end, len(m.data))
	}
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if recover() != nil {
			err = errMappedFault
		}
	}()
	r, n, err := decodeRecord(m.data[pos.off:end])
	if err == nil && n != int(pos.size) {
		err = errBadLength
	}
	return r, err
}

// mappingLocked returns segment seq's mapping with a reference acquired
// for the caller, mapping it first if need be; nil when the segment is not
// sealed and durable, or cannot be mapped.
func (s *Store) mappingLocked(seq uint32) *segmentMap {
	if seq >= s.mu.durable.seg || s.mu.closing {
		return nil // the active segment still grows: pread
	}
	if m := s.mu.maps[seq]; m != nil {
		m.acquire()
		return m
	}
	if s.mu.unmappable[seq] {
		return nil
	}
	m, err := s.mapSegmentLocked(seq)
	if err != nil {
		s.mu.unmappable[seq] = true
		return nil
	}
	s.mu.maps[seq] = m
	m.acquire()
	return m
}

func (s *Store) mapSegmentLocked(seq uint32) (*segmentMap, error) {
	f, err := s.readerLocked(seq)
	if err != nil {
		return nil, err
	}
	mapper, ok := f.(walfs.Mapper)
	if !ok {
		return nil, walfs.ErrNoMapping
	}
	size, err := f.Size()
	if err != nil {
		return nil, err
	}
	mapping, err := mapper.MapReadOnly(size)
	if err != nil {
		return nil, err
	}
	m := &segmentMap{mapping: mapping, data: mapping.Bytes()}
	m.refs.Store(1) // the store's own
	return m, nil
}

// unmapLocked drops the store's reference to segment seq's mapping: it is
// unmapped now, or when the last lease on it is released.
func (s *Store) unmapLocked(seq uint32) {
	if m := s.mu.maps[seq]; m != nil {
		delete(s.mu.maps, seq)
		m.release()
	}
	delete(s.mu.unmappable, seq)
}
