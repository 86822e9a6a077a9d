package wal

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
)

// Record framing (docs/format/wal.md §2). All integers little-endian.
//
//	0  u32 length   bytes after the 8-byte prefix (header body + payload)
//	4  u32 crc32c   Castagnoli, over bytes [8, 8+length)
//	8  u8  version  recordVersion
//	9  u8  type     RecordType
//	10 u16 flags    bit 0: payload encrypted (crypt.go); others 0
//	12 u64 ledger
//	20 i64 entry
//	28 u64 span first
//	36 u64 span end
//	44 i64 lac      piggybacked last-add-confirmed (-1 if none)
//	52 payload
const (
	recordVersion    = 1
	recordPrefixSize = 8
	recordBodyFixed  = 44
	// RecordHeaderSize is the framing overhead of every record.
	RecordHeaderSize = recordPrefixSize + recordBodyFixed
	// MaxPayload bounds one entry's payload; larger lengths are corruption.
	MaxPayload = 64 << 20
)

// RecordType says what a record means to a ledger.
type RecordType uint8

const (
	// RecordEntry carries one ledger entry and its payload.
	RecordEntry RecordType = 1
	// RecordFence marks the ledger fenced; entry is the last entry then.
	RecordFence RecordType = 2
	// RecordClose closes the ledger at entry; later entries are dropped.
	RecordClose RecordType = 3
	// RecordDelete deletes the ledger.
	RecordDelete RecordType = 4
)

func (t RecordType) valid() bool { return t >= RecordEntry && t <= RecordDelete }

// Span is the global offset range [First, End) a writer attaches to an entry.
type Span struct {
	First, End uint64
}

// Record is one decoded journal record. Payload aliases the decoded buffer.
type Record struct {
	Type RecordType
	// Flags: flagEncrypted if Payload is sealed (crypt.go).
	Flags   uint16
	Ledger  uint64
	Entry   int64
	Span    Span
	LAC     int64
	Payload []byte
}

// Decoding errors. errShortRecord means the bytes end inside a record,
// which at a journal's end is a torn write.
var (
	errShortRecord = errors.New("wal: record extends past the end of the data")
	errBadLength   = errors.New("wal: record length out of range")
	errChecksum    = errors.New("wal: record checksum mismatch")
	errBadVersion  = errors.New("wal: unknown record version")
	errBadType     = errors.New("wal: unknown record type")
	errBadFlags    = errors.New("wal: unknown record flags")
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// appendRecordHeader appends r's framing (RecordHeaderSize bytes, the
// checksum over the payload included) but not the payload, so that the
// payload can be copied once, straight to where it is written.
func appendRecordHeader(buf []byte, r *Record) []byte {
	start := len(buf)
	buf = binary.LittleEndian.AppendUint32(buf, uint32(recordBodyFixed+len(r.Payload)))
	buf = binary.LittleEndian.AppendUint32(buf, 0) // crc, filled below
	buf = append(buf, recordVersion, byte(r.Type))
	buf = binary.LittleEndian.AppendUint16(buf, r.Flags)
	buf = binary.LittleEndian.AppendUint64(buf, r.Ledger)
	buf = binary.LittleEndian.AppendUint64(buf, uint64(r.Entry))
	buf = binary.LittleEndian.AppendUint64(buf, r.Span.First)
	buf = binary.LittleEndian.AppendUint64(buf, r.Span.End)
	buf = binary.LittleEndian.AppendUint64(buf, uint64(r.LAC))
	crc := crc32.Checksum(buf[start+recordPrefixSize:], castagnoli)
	crc = crc32.Update(crc, castagnoli, r.Payload)
	binary.LittleEndian.PutUint32(buf[start+4:], crc)
	return buf
}

// decodeRecord decodes the record at the start of b and returns it with its
// encoded size. It never reads past b and never panics.
func decodeRecord(b []byte) (Record, int, error) {
	if len(b) < recordPrefixSize {
		return Record{}, 0, errShortRecord
	}
	length := binary.LittleEndian.Uint32(b)
	if length < recordBodyFixed || length > recordBodyFixed+MaxPayload+sealedOverhead {
		return Record{}, 0, errBadLength
	}
	total := recordPrefixSize + int(length)
	if len(b) < total {
		return Record{}, 0, errShortRecord
	}
	body := b[recordPrefixSize:total]
	if crc32.Checksum(body, castagnoli) != binary.LittleEndian.Uint32(b[4:]) {
		return Record{}, 0, errChecksum
	}
	if body[0] != recordVersion {
		return Record{}, 0, errBadVersion
	}
	r := Record{
		Type:    RecordType(body[1]),
		Flags:   binary.LittleEndian.Uint16(body[2:]),
		Ledger:  binary.LittleEndian.Uint64(body[4:]),
		Entry:   int64(binary.LittleEndian.Uint64(body[12:])),
		Span:    Span{First: binary.LittleEndian.Uint64(body[20:]), End: binary.LittleEndian.Uint64(body[28:])},
		LAC:     int64(binary.LittleEndian.Uint64(body[36:])),
		Payload: body[recordBodyFixed:],
	}
	if !r.Type.valid() {
		return Record{}, 0, errBadType
	}
	if r.Flags&^knownFlags != 0 || (r.Flags != 0 && r.Type != RecordEntry) {
		return Record{}, 0, errBadFlags
	}
	return r, total, nil
}

// peekHeader reads the claimed ledger and entry of a record whose checksum
// failed, for error reports; the values are unverified.
func peekHeader(b []byte) (ledger uint64, entry int64, ok bool) {
	if len(b) < RecordHeaderSize {
		return 0, 0, false
	}
	return binary.LittleEndian.Uint64(b[12:]), int64(binary.LittleEndian.Uint64(b[20:])), true
}
