package wal

import (
	"errors"
	"fmt"
)

// scanResult is what scanning one segment's bytes found.
type scanResult struct {
	header segmentHeader
	// metas includes metaCorrupt entries for damaged stretches.
	metas       []recordMeta
	corruptions []*CorruptionError
	// end is the offset just past the last valid record (or damaged stretch
	// that valid records follow).
	end int64
	// torn: the bytes from end on are a torn tail (only reported for the
	// journal's last segment; elsewhere damage at the end is corruption).
	torn bool
}

// scanSegment verifies every record of a segment. It does no I/O: name is
// only used in error reports.
func scanSegment(name string, b []byte, tail bool) (scanResult, error) {
	h, err := decodeSegmentHeader(b)
	if err != nil {
		return scanResult{}, err
	}
	res := scanResult{header: h, end: segmentHeaderSize}
	off := segmentHeaderSize
	for off < len(b) {
		r, n, err := decodeRecord(b[off:])
		if err == nil {
			res.metas = append(res.metas, recordMeta{
				Type: r.Type, Ledger: r.Ledger, Entry: r.Entry, LAC: r.LAC,
				Offset: uint32(off), Size: uint32(n),
			})
			off += n
			res.end = int64(off)
			continue
		}
		next := resync(b, off+1)
		if next < 0 && tail {
			res.torn = true
			return res, nil
		}
		if next < 0 {
			next = len(b)
		}
		res.addCorruption(name, b, off, next, err)
		off = next
		res.end = int64(off)
	}
	return res, nil
}

// addCorruption records the damaged stretch b[from:to]. If the damaged
// record's own length leads exactly to the next valid record, only its
// checksum failed and its header fields are a credible attribution.
func (res *scanResult) addCorruption(name string, b []byte, from, to int, cause error) {
	ce := &CorruptionError{Segment: name, Offset: int64(from), Length: int64(to - from), Err: cause}
	meta := recordMeta{Type: metaCorrupt, Entry: metaUnattributed, Offset: uint32(from), Size: uint32(to - from)}
	if errors.Is(cause, errChecksum) {
		if ledger, entry, ok := peekHeader(b[from:]); ok && from+recordLen(b[from:]) == to {
			ce.Ledger, ce.Entry, ce.Attributed = ledger, entry, true
			meta.Ledger, meta.Entry = ledger, entry
		}
	}
	res.metas = append(res.metas, meta)
	res.corruptions = append(res.corruptions, ce)
}

func recordLen(b []byte) int {
	if len(b) < recordPrefixSize {
		return 0
	}
	return recordPrefixSize + int(uint32(b[0])|uint32(b[1])<<8|uint32(b[2])<<16|uint32(b[3])<<24)
}

// resync returns the offset of the first valid record at or after from, or
// -1. Cheap field checks run before the checksum.
func resync(b []byte, from int) int {
	for p := from; p+RecordHeaderSize <= len(b); p++ {
		if b[p+8] != recordVersion || !RecordType(b[p+9]).valid() {
			continue
		}
		if _, _, err := decodeRecord(b[p:]); err == nil {
			return p
		}
	}
	return -1
}

func segmentCorruption(name string, err error) *CorruptionError {
	return &CorruptionError{Segment: name, Offset: 0, Err: fmt.Errorf("segment header: %w", err)}
}
