package parquetfile

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

// FuzzDecodeMeta feeds arbitrary footer values to decodeMeta: it must not
// panic, must reject with ErrCorrupt or ErrUnsupportedVersion, and what it
// accepts must satisfy the footer's invariants and render back to exactly
// the same strings (one canonical form).
func FuzzDecodeMeta(f *testing.F) {
	good := digestOf(nil)
	f.Add("1", "0", "11", "[[5,6]]", "10", good)
	f.Add("1", "5", "6", "[]", "1", good)
	f.Add("1", "0", "18446744073709551615", "[]", "1", good)
	f.Add("1", "0", "100", "[[0,1],[99,100]]", "98", good)
	f.Add("1", "0", "100", "[[0,1],[1,2]]", "98", good)
	f.Add("1", "0", "100", "[[0,1] ,[3,4]]", "98", good)
	f.Add("1", "0", "100", "[[0,1],[3,4]", "98", good)
	f.Add("1", "0", "100", "[[0,1,2]]", "99", good)
	f.Add("1", "0", "100", "[[1e1,20]]", "90", good)
	f.Add("1", "0", "100", "null", "100", good)
	f.Add("2", "0", "1", "[]", "1", good)
	f.Add("1", "-1", "1", "[]", "2", "sha256:")
	f.Fuzz(func(t *testing.T, version, first, end, holes, rows, digest string) {
		kv := map[string]string{keyFormatVersion: version, keyFirst: first, keyEnd: end, keyHoles: holes, keyRows: rows, keyDigest: digest}
		m, err := decodeMeta(func(k string) (string, bool) { v, ok := kv[k]; return v, ok })
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrUnsupportedVersion) {
				t.Fatalf("error %v is neither ErrCorrupt nor ErrUnsupportedVersion", err)
			}
			return
		}
		got := footerValues(m)
		want := []string{version, first, end, holes, rows, digest}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("%s: accepted %q, renders as %q", footerKeys[i], want[i], got[i])
			}
		}
		if m.First >= m.End || uint64(m.Rows)+holeLen(m.Holes) != m.End-m.First {
			t.Fatalf("accepted inconsistent %+v", m)
		}
		ix := newRowIndex(m.First, m.End, m.Holes)
		if ix.rowsBelow(m.End) != m.Rows {
			t.Fatalf("rowsBelow(end) = %d, rows %d", ix.rowsBelow(m.End), m.Rows)
		}
		if m.Rows > 0 {
			last := ix.offsetOfRow(m.Rows - 1)
			if ix.inHole(last) || ix.rowsBelow(last) != m.Rows-1 {
				t.Fatalf("offsetOfRow(%d) = %d, which is a hole or another row", m.Rows-1, last)
			}
		}
	})
}

// FuzzPlainByteArrays feeds arbitrary dictionary pages to the decoder:
// no panic, and what it accepts re-encodes to the bytes it consumed.
func FuzzPlainByteArrays(f *testing.F) {
	f.Add([]byte{1, 0, 0, 0, 'a', 2, 0, 0, 0, 'b', 'c'}, 2)
	f.Add([]byte{1, 0, 0, 0}, 1)
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 'a'}, 1)
	f.Add([]byte{}, 0)
	f.Add([]byte{0, 0, 0, 0}, -1)
	f.Fuzz(func(t *testing.T, data []byte, n int) {
		values, err := plainByteArrays(data, n)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v is not ErrCorrupt", err)
			}
			return
		}
		if len(values) != n {
			t.Fatalf("%d values, asked for %d", len(values), n)
		}
		var enc []byte
		for _, v := range values {
			enc = binary.LittleEndian.AppendUint32(enc, uint32(len(v)))
			enc = append(enc, v...)
		}
		if !bytes.HasPrefix(data, enc) {
			t.Fatalf("values %q do not re-encode to a prefix of the input", values)
		}
	})
}

// TestRowIndex checks rowsBelow, offsetOfRow, inHole and skipHole against
// a walk over every offset.
func TestRowIndex(t *testing.T) {
	const first, end = 10, 40
	holes := []Range{{10, 12}, {15, 16}, {20, 30}, {39, 40}}
	ix := newRowIndex(first, end, holes)
	var rows []uint64
	for o := uint64(first); o < end; o++ {
		hole := false
		for _, h := range holes {
			hole = hole || (h.First <= o && o < h.End)
		}
		if ix.inHole(o) != hole {
			t.Fatalf("inHole(%d) = %v", o, !hole)
		}
		if ix.rowsBelow(o) != int64(len(rows)) {
			t.Fatalf("rowsBelow(%d) = %d, want %d", o, ix.rowsBelow(o), len(rows))
		}
		if !hole {
			rows = append(rows, o)
		}
	}
	for r, o := range rows {
		if got := ix.offsetOfRow(int64(r)); got != o {
			t.Fatalf("offsetOfRow(%d) = %d, want %d", r, got, o)
		}
	}
	for o, want := range map[uint64]uint64{10: 12, 11: 12, 12: 12, 15: 16, 25: 30, 38: 38, 39: 40} {
		if got := ix.skipHole(o); got != want {
			t.Fatalf("skipHole(%d) = %d, want %d", o, got, want)
		}
	}
	if ix.rowsBelow(end) != int64(len(rows)) {
		t.Fatal("rowsBelow(end)")
	}
}

func TestBloomBytes(t *testing.T) {
	for ndv, want := range map[int64]int64{1: 32, 1000: 2048, 8192: 16384, 65536: 131072} {
		if got := bloomBytes(ndv, 0.01); got != want {
			t.Errorf("bloomBytes(%d) = %d, want %d (arrow-go's size)", ndv, got, want)
		}
	}
}
