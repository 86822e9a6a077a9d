package batch

import (
	"encoding/binary"
	"fmt"
)

// minRecordSize is the smallest encoded record: six one-byte varints
// (topic, key and value lengths, header count, client time, message id length).
const minRecordSize = 6

// Decoded is a decoded header plus the undecoded record bytes; iterate the
// records with Next. Slices returned alias the input buffer.
type Decoded struct {
	Header
	rest        []byte
	remaining   uint32
	schemaIDs   bool // records end with their schema id (flagSchemaIDs)
	sawSchemaID bool // some record had a schema id other than 0
}

// Decode reads the header of a batch and prepares to iterate its records.
func Decode(buf []byte) (*Decoded, error) {
	if len(buf) < headerFixedSize {
		return nil, fmt.Errorf("%w: %d bytes, header needs %d", ErrCorrupt, len(buf), headerFixedSize)
	}
	if buf[0] != Version {
		return nil, fmt.Errorf("%w: %d", ErrVersion, buf[0])
	}
	if buf[2]&^flagSchemaIDs != 0 || buf[3] != 0 {
		return nil, fmt.Errorf("%w: reserved header bytes are not zero", ErrCorrupt)
	}
	d := &Decoded{schemaIDs: buf[2]&flagSchemaIDs != 0}
	d.Kind = Kind(buf[1])
	if d.Kind != KindRecords {
		return nil, fmt.Errorf("%w: unknown kind %d", ErrCorrupt, d.Kind)
	}
	d.FirstOffset = binary.LittleEndian.Uint64(buf[4:])
	d.Count = binary.LittleEndian.Uint32(buf[12:])
	d.IngestTimeMicros = int64(binary.LittleEndian.Uint64(buf[16:]))
	r := reader{buf: buf[headerFixedSize:]}
	runCount := r.uvarint()
	// Each run takes at least four one-byte varints: bound the allocation.
	if runCount > uint64(d.Count) || runCount > uint64(len(r.buf))/4 {
		return nil, fmt.Errorf("%w: %d runs for %d records", ErrCorrupt, runCount, d.Count)
	}
	d.Runs = make([]ProducerRun, 0, runCount)
	for i := uint64(0); i < runCount && r.err == nil; i++ {
		run := ProducerRun{ProducerID: r.uvarint(), Epoch: r.uvarint(), FirstSeq: r.uvarint()}
		run.Count = r.uint32()
		d.Runs = append(d.Runs, run)
	}
	if r.err != nil {
		return nil, r.err
	}
	if err := d.validate(); err != nil {
		return nil, err
	}
	if uint64(d.Count)*minRecordSize > uint64(len(r.buf)) {
		return nil, fmt.Errorf("%w: %d records cannot fit in %d bytes", ErrCorrupt, d.Count, len(r.buf))
	}
	d.rest, d.remaining = r.buf, d.Count
	return d, nil
}

// Next decodes the next record into rec. It returns false when all records
// have been read or on error; Err tells which.
func (d *Decoded) Next(rec *Record) (bool, error) {
	if d.remaining == 0 {
		if len(d.rest) != 0 {
			return false, fmt.Errorf("%w: %d trailing bytes", ErrCorrupt, len(d.rest))
		}
		if d.schemaIDs && !d.sawSchemaID {
			return false, fmt.Errorf("%w: schema id flag set, every schema id 0", ErrCorrupt)
		}
		return false, nil
	}
	r := reader{buf: d.rest}
	rec.Topic = string(r.bytes())
	rec.Key = r.bytes()
	rec.Value = r.bytes()
	headerCount := r.uvarint()
	if headerCount > uint64(len(r.buf)) { // each header needs at least two bytes
		return false, fmt.Errorf("%w: %d headers in %d bytes", ErrCorrupt, headerCount, len(r.buf))
	}
	rec.Headers = rec.Headers[:0]
	for i := uint64(0); i < headerCount && r.err == nil; i++ {
		rec.Headers = append(rec.Headers, MessageHeader{Key: string(r.bytes()), Value: r.bytes()})
	}
	rec.ClientTimeMicros = r.varint()
	rec.MessageID = r.bytes()
	rec.SchemaID = 0
	if d.schemaIDs {
		rec.SchemaID = r.uint32()
		d.sawSchemaID = d.sawSchemaID || rec.SchemaID != 0
	}
	if r.err != nil {
		return false, r.err
	}
	d.rest = r.buf
	d.remaining--
	return true, nil
}

// All decodes every record; convenient for tests and small batches.
func (d *Decoded) All() ([]Record, error) {
	records := make([]Record, 0, d.remaining)
	for {
		var rec Record
		ok, err := d.Next(&rec)
		if err != nil {
			return nil, err
		}
		if !ok {
			return records, nil
		}
		records = append(records, rec)
	}
}

// reader reads varints and length-prefixed bytes, remembering the first error.
type reader struct {
	buf []byte
	err error
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.buf)
	if n <= 0 || overlong(r.buf, n) {
		r.err = fmt.Errorf("%w: bad uvarint", ErrCorrupt)
		return 0
	}
	r.buf = r.buf[n:]
	return v
}

func (r *reader) uint32() uint32 {
	v := r.uvarint()
	if v > 1<<32-1 {
		r.err = fmt.Errorf("%w: %d does not fit 32 bits", ErrCorrupt, v)
		return 0
	}
	return uint32(v)
}

func (r *reader) varint() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.buf)
	if n <= 0 || overlong(r.buf, n) {
		r.err = fmt.Errorf("%w: bad varint", ErrCorrupt)
		return 0
	}
	r.buf = r.buf[n:]
	return v
}

func (r *reader) bytes() []byte {
	n := r.uvarint()
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.buf)) {
		r.err = fmt.Errorf("%w: length %d beyond %d remaining bytes", ErrCorrupt, n, len(r.buf))
		return nil
	}
	b := r.buf[:n:n]
	r.buf = r.buf[n:]
	return b
}

// overlong reports a varint of n bytes written with more bytes than needed
// (a zero final group). Rejecting it keeps one encoding per batch.
func overlong(buf []byte, n int) bool { return n > 1 && buf[n-1] == 0 }
