package wal

import (
	"fmt"
	"io"

	"orderlog/ingest/wal/walfs"
)

// Status is a store's answer about one entry.
type Status int

const (
	// Unknown: the store cannot tell (older incarnation, damaged bytes, not
	// yet durable, deleted). Never evidence of absence.
	Unknown Status = iota
	// Present: the store holds the entry with a valid checksum.
	Present
	// Absent: this incarnation never held the entry.
	Absent
)

func (st Status) String() string {
	switch st {
	case Present:
		return "PRESENT"
	case Absent:
		return "ABSENT"
	default:
		return "UNKNOWN"
	}
}

// ReadResult is the answer to Read. Span, LAC and Payload are set only when
// Status is Present; Payload is a fresh copy.
type ReadResult struct {
	Status  Status
	Span    Span
	LAC     int64
	Payload []byte
	// Err explains an Unknown caused by damage (a *CorruptionError) or an
	// I/O error; nil otherwise.
	Err error
}

// Read answers whether the store holds entry of ledger. Only durable
// entries are Present.
func (s *Store) Read(ledger uint64, entry int64) ReadResult {
	s.mu.Lock()
	status, pos := s.lookupLocked(ledger, entry)
	s.mu.Unlock()
	if status != Present {
		return ReadResult{Status: status}
	}
	return s.readAt(ledger, entry, pos)
}

// readAt reads entry of ledger from the record at pos (lookupLocked's
// answer) into fresh memory.
func (s *Store) readAt(ledger uint64, entry int64, pos position) ReadResult {
	r, err := s.readRecord(pos)
	if err != nil {
		return ReadResult{Status: Unknown, Err: err}
	}
	if r.Type != RecordEntry || r.Ledger != ledger || r.Entry != entry {
		return ReadResult{Status: Unknown, Err: &CorruptionError{
			Segment: segmentName(pos.seg), Offset: int64(pos.off), Length: int64(pos.size),
			Ledger: ledger, Entry: entry, Attributed: true, Err: fmt.Errorf("record is ledger %d entry %d", r.Ledger, r.Entry)}}
	}
	return ReadResult{Status: Present, Span: r.Span, LAC: r.LAC, Payload: r.Payload}
}

// lookupLocked decides everything Read can decide without I/O; Present
// means "read the record at pos".
func (s *Store) lookupLocked(ledger uint64, entry int64) (Status, position) {
	if entry < 0 {
		return Absent, position{}
	}
	if _, gone := s.mu.idx.deleted[ledger]; gone {
		return Unknown, position{}
	}
	l := s.mu.idx.ledgers[ledger]
	if l == nil {
		if s.mu.idx.mayHide(ledger) {
			return Unknown, position{}
		}
		return Absent, position{}
	}
	if entry < int64(len(l.entries)) {
		pos := l.entries[entry]
		if !pos.known() || !pos.durableAt(s.mu.durable) {
			return Unknown, position{}
		}
		return Present, pos
	}
	if l.closed && entry > l.closedLast {
		return Absent, position{}
	}
	return s.trustLocked(l), position{}
}

// trustLocked answers for an entry the ledger does not hold: Absent if this
// incarnation wrote the ledger and no damage may have hidden entries of it,
// Unknown otherwise.
func (s *Store) trustLocked(l *ledgerState) Status {
	if l.tainted || l.incarnation != s.id.incarnation {
		return Unknown
	}
	return Absent
}

// LastEntry returns the ledger's last durable entry (-1 if none) and the
// highest LAC piggybacked on it. Status is Unknown if the ledger was written
// by an older incarnation, may have lost entries to damage, or was deleted.
func (s *Store) LastEntry(ledger uint64) LedgerState {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, gone := s.mu.idx.deleted[ledger]; gone {
		return LedgerState{Status: Unknown, Last: -1, LAC: -1}
	}
	l := s.mu.idx.ledgers[ledger]
	if l == nil {
		if s.mu.idx.mayHide(ledger) {
			return LedgerState{Status: Unknown, Last: -1, LAC: -1}
		}
		return LedgerState{Status: Present, Last: -1, LAC: -1}
	}
	last := l.last()
	for last >= 0 && !l.entries[last].durableAt(s.mu.durable) {
		last--
	}
	st := LedgerState{Status: Present, Last: last, LAC: l.lac}
	if s.trustLocked(l) == Unknown {
		st.Status = Unknown
	}
	return st
}

// readRecord reads and verifies the record at pos, and decrypts its
// payload if it is sealed.
func (s *Store) readRecord(pos position) (Record, error) {
	r, buf, err := s.readRaw(pos)
	if err != nil || r.Flags&flagEncrypted == 0 {
		return r, err
	}
	if r.Payload, err = s.cfg.Keys.open(buf, r.Payload); err != nil {
		if ke, ok := err.(*KeyError); ok {
			ke.Segment, ke.NoKeys = segmentName(pos.seg), s.cfg.Keys == nil
		}
		return Record{}, &CorruptionError{Segment: segmentName(pos.seg), Offset: int64(pos.off), Length: int64(pos.size),
			Ledger: r.Ledger, Entry: r.Entry, Attributed: true, Err: err}
	}
	return r, nil
}

// readRaw reads and verifies the record at pos; a sealed payload stays
// sealed. buf holds the encoded record, which r aliases.
func (s *Store) readRaw(pos position) (r Record, buf []byte, err error) {
	f, err := s.reader(pos.seg)
	if err != nil {
		return Record{}, nil, err
	}
	buf = make([]byte, pos.size)
	if n, err := f.ReadAt(buf, int64(pos.off)); n < len(buf) {
		if err == nil {
			err = io.ErrUnexpectedEOF
		}
		return Record{}, nil, fmt.Errorf("wal: read %s at %d: %w", segmentName(pos.seg), pos.off, err)
	}
	r, n, err := decodeRecord(buf)
	if err == nil && n != len(buf) {
		err = errBadLength
	}
	if err != nil {
		ledger, entry, ok := peekHeader(buf)
		return Record{}, nil, &CorruptionError{Segment: segmentName(pos.seg), Offset: int64(pos.off), Length: int64(pos.size),
			Ledger: ledger, Entry: entry, Attributed: ok, Err: err}
	}
	return r, buf, nil
}

// reader returns a read handle on segment seq, opening it once.
func (s *Store) reader(seq uint32) (walfs.File, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.readerLocked(seq)
}

func (s *Store) readerLocked(seq uint32) (walfs.File, error) {
	if f := s.mu.readers[seq]; f != nil {
		return f, nil
	}
	if s.mu.closing {
		return nil, ErrClosed
	}
	file, err := s.fs.Open(s.path(segmentName(seq)))
	if err != nil {
		return nil, fmt.Errorf("wal: open %s: %w", segmentName(seq), err)
	}
	s.mu.readers[seq] = file
	return file, nil
}
