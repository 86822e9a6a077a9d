package batch

import (
	"encoding/binary"
	"fmt"
	"slices"
)

// Encode appends the encoding of a batch to dst. h.Count must equal
// len(records) and the runs must cover them.
func Encode(dst []byte, h Header, records []Record) ([]byte, error) {
	if int(h.Count) != len(records) {
		return nil, fmt.Errorf("batch: header count %d, %d records", h.Count, len(records))
	}
	if err := h.validate(); err != nil {
		return nil, err
	}
	// One allocation for the whole entry: batches are up to MiBs, and
	// growing by appends copied them several times.
	dst = slices.Grow(dst, EncodedSizeBound(h, records))
	var flags byte
	if hasSchemaIDs(records) {
		flags = flagSchemaIDs
	}
	dst = append(dst, Version, byte(h.Kind), flags, 0)
	dst = binary.LittleEndian.AppendUint64(dst, h.FirstOffset)
	dst = binary.LittleEndian.AppendUint32(dst, h.Count)
	dst = binary.LittleEndian.AppendUint64(dst, uint64(h.IngestTimeMicros))
	dst = binary.AppendUvarint(dst, uint64(len(h.Runs)))
	for _, run := range h.Runs {
		dst = binary.AppendUvarint(dst, run.ProducerID)
		dst = binary.AppendUvarint(dst, run.Epoch)
		dst = binary.AppendUvarint(dst, run.FirstSeq)
		dst = binary.AppendUvarint(dst, uint64(run.Count))
	}
	for i := range records {
		dst = appendRecord(dst, &records[i])
		if flags&flagSchemaIDs != 0 {
			dst = binary.AppendUvarint(dst, uint64(records[i].SchemaID))
		}
	}
	return dst, nil
}

func hasSchemaIDs(records []Record) bool {
	for i := range records {
		if records[i].SchemaID != 0 {
			return true
		}
	}
	return false
}

// EncodedSizeBound is at least the encoded size of the batch: a dst with
// this much room is never grown by Encode.
func EncodedSizeBound(h Header, records []Record) int {
	const varint = binary.MaxVarintLen64
	n := 4 + 8 + 4 + 8 + varint + len(h.Runs)*4*varint
	for i := range records {
		r := &records[i]
		n += 7*varint + len(r.Topic) + len(r.Key) + len(r.Value) + len(r.MessageID)
		for _, hd := range r.Headers {
			n += 2*varint + len(hd.Key) + len(hd.Value)
		}
	}
	return n
}

func appendRecord(dst []byte, r *Record) []byte {
	dst = appendBytes(dst, []byte(r.Topic))
	dst = appendBytes(dst, r.Key)
	dst = appendBytes(dst, r.Value)
	dst = binary.AppendUvarint(dst, uint64(len(r.Headers)))
	for _, h := range r.Headers {
		dst = appendBytes(dst, []byte(h.Key))
		dst = appendBytes(dst, h.Value)
	}
	dst = binary.AppendVarint(dst, r.ClientTimeMicros)
	return appendBytes(dst, r.MessageID)
}

func appendBytes(dst, b []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}
