package wal

import (
	"bytes"
	"testing"
)

func fuzzSeedRecords() [][]byte {
	valid := appendRecord(nil, &Record{Type: RecordEntry, Ledger: 7, Entry: 3, Span: Span{First: 10, End: 20}, LAC: 2, Payload: []byte("payload")})
	fence := appendRecord(nil, &Record{Type: RecordFence, Ledger: 7, Entry: -1, LAC: 2})
	flipped := append([]byte(nil), valid...)
	flipped[RecordHeaderSize+1] ^= 0x10
	two := append(append([]byte(nil), valid...), fence...)
	return [][]byte{
		nil,
		valid,
		fence,
		valid[:len(valid)-3], // torn
		valid[:5],            // torn inside the length prefix
		flipped,
		make([]byte, 64), // zeroed
		two,
		{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0},
	}
}

// FuzzDecodeRecord: the decoder never panics or reads past its input, and
// whatever it accepts re-encodes to exactly the bytes it consumed.
func FuzzDecodeRecord(f *testing.F) {
	for _, seed := range fuzzSeedRecords() {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, n, err := decodeRecord(b)
		if err != nil {
			if n != 0 {
				t.Fatalf("error %v with size %d", err, n)
			}
			return
		}
		if n < RecordHeaderSize || n > len(b) {
			t.Fatalf("size %d out of range for %d bytes", n, len(b))
		}
		again := appendRecord(nil, &r)
		if !bytes.Equal(again, b[:n]) {
			t.Fatalf("re-encoding differs:\n%x\n%x", again, b[:n])
		}
	})
}

// FuzzScanSegment: scanning arbitrary bytes after a valid segment header
// never panics, and what it reports tiles the segment: records and damaged
// stretches are in order, do not overlap and end at or before the data.
func FuzzScanSegment(f *testing.F) {
	for _, seed := range fuzzSeedRecords() {
		f.Add(seed, false)
		f.Add(seed, true)
	}
	header := encodeSegmentHeader(segmentHeader{seq: 3, incarnation: 9})
	f.Fuzz(func(t *testing.T, body []byte, tail bool) {
		b := append(append([]byte(nil), header...), body...)
		res, err := scanSegment("x", b, tail)
		if err != nil {
			t.Fatalf("scan: %v", err)
		}
		off := int64(segmentHeaderSize)
		for _, m := range res.metas {
			if int64(m.Offset) < off || int64(m.Offset)+int64(m.Size) > int64(len(b)) {
				t.Fatalf("meta %+v out of order or bounds (at %d of %d)", m, off, len(b))
			}
			if m.Type != metaCorrupt {
				if _, n, err := decodeRecord(b[m.Offset:]); err != nil || n != int(m.Size) {
					t.Fatalf("meta %+v is not a valid record: %v", m, err)
				}
			}
			off = int64(m.Offset) + int64(m.Size)
		}
		if res.end < off || res.end > int64(len(b)) {
			t.Fatalf("end %d outside [%d, %d]", res.end, off, len(b))
		}
		if !tail && res.torn {
			t.Fatalf("torn reported for a non-tail segment")
		}
	})
}

// FuzzDecodeIndex: checkpoint decoding never panics and round-trips.
func FuzzDecodeIndex(f *testing.F) {
	f.Add(encodeSegmentIndex(&segmentIndex{seq: 1, incarnation: 2, end: 56 + 60 + 52, metas: []recordMeta{
		{Type: RecordDelete, Ledger: 9, Entry: -1, LAC: -1},
		{Type: RecordEntry, Ledger: 1, Entry: 0, LAC: -1, Size: 60},
		{Type: RecordFence, Ledger: 1, Entry: -1, LAC: 0, Size: 52},
	}}))
	f.Add([]byte("OLWALIDX"))
	f.Fuzz(func(t *testing.T, b []byte) {
		x, err := decodeSegmentIndex(b)
		if err != nil {
			return
		}
		if again := encodeSegmentIndex(x); !bytes.Equal(again, b) {
			t.Fatalf("index re-encoding differs")
		}
	})
}

// appendRecord appends r's framing and payload to buf, as the store frames
// a record into its batch (enqueueFramedLocked).
func appendRecord(buf []byte, r *Record) []byte {
	return append(appendRecordHeader(buf, r), r.Payload...)
}
