package sequencer

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// RecordKind says what a commit record decides.
type RecordKind uint8

const (
	// KindWritten: Range lies in entry Entry of ledger Ledger.
	KindWritten RecordKind = 1
	// KindHole: Range is a hole (invariant H).
	KindHole RecordKind = 2
	// KindWatermark: every offset below Watermark is resolved.
	KindWatermark RecordKind = 3
)

func (k RecordKind) String() string {
	switch k {
	case KindWritten:
		return "written"
	case KindHole:
		return "hole"
	case KindWatermark:
		return "watermark"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Record is one commit-log decision. Seq numbers the records a Machine
// emits, in the order they must be appended; it is not stored.
type Record struct {
	Kind      RecordKind
	Range     Range  // Written, Hole
	Ledger    uint64 // Written
	Entry     int64  // Written
	Watermark uint64 // Watermark
	Seq       uint64
}

func (r Record) String() string {
	switch r.Kind {
	case KindWritten:
		return fmt.Sprintf("written%s→%d/%d", r.Range, r.Ledger, r.Entry)
	case KindHole:
		return fmt.Sprintf("hole%s", r.Range)
	case KindWatermark:
		return fmt.Sprintf("watermark(%d)", r.Watermark)
	}
	return r.Kind.String()
}

// CommitEntryVersion is the version byte of a commit-log entry payload.
const CommitEntryVersion = 1

// ErrCorruptCommitEntry is returned by DecodeCommitEntry when a commit-log
// entry payload is truncated, has an unknown version or record kind, or
// holds an invalid range.
var ErrCorruptCommitEntry = errors.New("sequencer: corrupt commit-log entry")

// maxRecordsPerEntry bounds the count a decoder will believe, so garbage
// cannot make it allocate without limit.
const maxRecordsPerEntry = 1 << 20

// EncodeCommitEntry appends the payload of one commit-log entry holding
// records, written by the leader of epoch, to dst (docs/format/commit-log.md).
func EncodeCommitEntry(dst []byte, epoch uint64, records []Record) []byte {
	dst = append(dst, CommitEntryVersion)
	dst = binary.LittleEndian.AppendUint64(dst, epoch)
	dst = binary.AppendUvarint(dst, uint64(len(records)))
	for _, r := range records {
		dst = appendRecord(dst, r)
	}
	return dst
}

// appendRecord appends one record: its kind byte, then its body.
func appendRecord(dst []byte, r Record) []byte {
	dst = append(dst, byte(r.Kind))
	switch r.Kind {
	case KindWritten:
		dst = binary.AppendUvarint(dst, r.Range.First)
		dst = binary.AppendUvarint(dst, r.Range.Len())
		dst = binary.AppendUvarint(dst, r.Ledger)
		dst = binary.AppendUvarint(dst, uint64(r.Entry))
	case KindHole:
		dst = binary.AppendUvarint(dst, r.Range.First)
		dst = binary.AppendUvarint(dst, r.Range.Len())
	case KindWatermark:
		dst = binary.AppendUvarint(dst, r.Watermark)
	}
	return dst
}

// DecodeCommitEntry decodes one commit-log entry payload. It returns
// ErrCorruptCommitEntry (wrapped, with the byte position) for anything that
// EncodeCommitEntry cannot have produced.
func DecodeCommitEntry(p []byte) (epoch uint64, records []Record, err error) {
	d := decoder{buf: p}
	if v := d.byte(); v != CommitEntryVersion {
		return 0, nil, d.fail(fmt.Sprintf("version %d", v))
	}
	epoch = d.u64()
	count := d.uvarint()
	if d.err != nil || count > maxRecordsPerEntry || count > uint64(len(p)) {
		return 0, nil, d.fail("record count")
	}
	records = make([]Record, 0, count)
	for i := uint64(0); i < count; i++ {
		r, ok := d.record()
		if !ok {
			return 0, nil, d.fail(fmt.Sprintf("record %d", i))
		}
		records = append(records, r)
	}
	if d.pos != len(p) {
		return 0, nil, d.fail("trailing bytes")
	}
	return epoch, records, nil
}

type decoder struct {
	scratch [binary.MaxVarintLen64]byte
	buf     []byte
	pos     int
	err     error
}

func (d *decoder) fail(what string) error {
	return fmt.Errorf("%w: %s at byte %d", ErrCorruptCommitEntry, what, d.pos)
}

func (d *decoder) byte() byte {
	if d.err != nil || d.pos >= len(d.buf) {
		d.err = ErrCorruptCommitEntry
		return 0
	}
	b := d.buf[d.pos]
	d.pos++
	return b
}

func (d *decoder) u64() uint64 {
	if d.err != nil || len(d.buf)-d.pos < 8 {
		d.err = ErrCorruptCommitEntry
		return 0
	}
	v := binary.LittleEndian.Uint64(d.buf[d.pos:])
	d.pos += 8
	return v
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.buf[d.pos:])
	// Only the minimal encoding is valid, so every payload has one reading.
	if n <= 0 || n != len(binary.AppendUvarint(d.scratch[:0], v)) {
		d.err = ErrCorruptCommitEntry
		return 0
	}
	d.pos += n
	return v
}

// rangeOf reads first and length; the range must be non-empty and must not
// wrap around.
func (d *decoder) rangeOf() (Range, bool) {
	first, length := d.uvarint(), d.uvarint()
	if d.err != nil || length == 0 || first+length < first {
		return Range{}, false
	}
	return Range{First: first, End: first + length}, true
}

func (d *decoder) record() (Record, bool) {
	r := Record{Kind: RecordKind(d.byte())}
	ok := true
	switch r.Kind {
	case KindWritten:
		r.Range, ok = d.rangeOf()
		r.Ledger = d.uvarint()
		entry := d.uvarint()
		if entry > 1<<62 {
			ok = false
		}
		r.Entry = int64(entry)
	case KindHole:
		r.Range, ok = d.rangeOf()
	case KindWatermark:
		r.Watermark = d.uvarint()
	default:
		ok = false
	}
	return r, ok && d.err == nil
}
