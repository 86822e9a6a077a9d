package wal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
)

// recordMeta is what the index keeps of one journal record: enough to
// replay its effect on ledger state without reading the payload.
type recordMeta struct {
	Type   RecordType
	Ledger uint64
	Entry  int64
	LAC    int64
	Offset uint32
	// Size is the encoded record size; for metaCorrupt the damaged length.
	Size uint32
}

// metaCorrupt marks a damaged stretch of a segment in an index file. Ledger
// and Entry are what the damaged record claimed, or metaUnattributed.
const metaCorrupt RecordType = 0xff

// metaUnattributed in Entry of a metaCorrupt meta means the damaged bytes
// could not be attributed to any ledger.
const metaUnattributed = -2

// Index checkpoint file, one per sealed segment (docs/format/wal.md §4):
//
//	0  [8]byte magic "OLWALIDX"
//	8  u32     version 1
//	12 u32     count of metas
//	16 u64     segment sequence number
//	24 u64     incarnation that wrote the segment
//	32 u64     end: offset just past the last valid record of the segment
//	40         count metas, each:
//	           u8 type, uvarint ledger, varint entry, varint lac-entry, uvarint size
//	last 4     u32 crc32c of everything before it
//
// Offsets are implicit: the metas tile the segment from its header on, each
// starting where the previous one ended. Varints are Go's encoding/binary
// ones (varint = zigzag); a non-minimal varint is rejected so that decoding
// and encoding are inverse. At about 10 bytes a meta, a 10 GiB store of
// 1 KiB entries has about 100 MB of checkpoints.
const (
	indexHeaderSize = 40
	indexVersion    = 1
)

var indexMagic = [8]byte{'O', 'L', 'W', 'A', 'L', 'I', 'D', 'X'}

var errBadIndex = errors.New("wal: bad index file")

// segmentIndex is the content of one index checkpoint. metas[i].Offset is
// implied by the sizes before it.
type segmentIndex struct {
	seq         uint32
	incarnation uint64
	end         int64
	metas       []recordMeta
}

func encodeSegmentIndex(x *segmentIndex) []byte {
	b := make([]byte, 0, indexHeaderSize+12*len(x.metas)+4)
	b = append(b, indexMagic[:]...)
	b = binary.LittleEndian.AppendUint32(b, indexVersion)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(x.metas)))
	b = binary.LittleEndian.AppendUint64(b, uint64(x.seq))
	b = binary.LittleEndian.AppendUint64(b, x.incarnation)
	b = binary.LittleEndian.AppendUint64(b, uint64(x.end))
	for _, m := range x.metas {
		b = append(b, byte(m.Type))
		b = binary.AppendUvarint(b, m.Ledger)
		b = binary.AppendVarint(b, m.Entry)
		b = binary.AppendVarint(b, m.LAC-m.Entry)
		b = binary.AppendUvarint(b, uint64(m.Size))
	}
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// decodeSegmentIndex verifies and decodes an index checkpoint.
func decodeSegmentIndex(b []byte) (*segmentIndex, error) {
	if len(b) < indexHeaderSize+4 || !bytes.Equal(b[:8], indexMagic[:]) {
		return nil, errBadIndex
	}
	body := b[:len(b)-4]
	if crc32.Checksum(body, castagnoli) != binary.LittleEndian.Uint32(b[len(b)-4:]) {
		return nil, errBadIndex
	}
	if binary.LittleEndian.Uint32(b[8:]) != indexVersion {
		return nil, errBadIndex
	}
	count := int(binary.LittleEndian.Uint32(b[12:]))
	seq := binary.LittleEndian.Uint64(b[16:])
	end := binary.LittleEndian.Uint64(b[32:])
	if seq > 1<<32-1 || end > 1<<32-1 || count > len(body)-indexHeaderSize {
		return nil, errBadIndex
	}
	x := &segmentIndex{
		seq:         uint32(seq),
		incarnation: binary.LittleEndian.Uint64(b[24:]),
		end:         int64(end),
		metas:       make([]recordMeta, count),
	}
	r := metaReader{b: body[indexHeaderSize:]}
	offset := uint64(segmentHeaderSize)
	for i := range x.metas {
		m := &x.metas[i]
		m.Type = RecordType(r.byte())
		m.Ledger = r.uvarint()
		m.Entry = r.varint()
		m.LAC = m.Entry + r.varint()
		size := r.uvarint()
		if size > 1<<32-1 || offset+size > 1<<32-1 {
			r.bad = true
		}
		m.Offset, m.Size = uint32(offset), uint32(size)
		offset += size
	}
	if r.bad || len(r.b) != 0 || (count > 0 && int64(offset) != x.end) {
		return nil, errBadIndex
	}
	return x, nil
}

// metaReader reads the fields of metas; bad is set by anything malformed
// or non-minimal.
type metaReader struct {
	b   []byte
	bad bool
}

func (r *metaReader) byte() byte {
	if len(r.b) == 0 {
		r.bad = true
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

func (r *metaReader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 || (n > 1 && r.b[n-1] == 0) {
		r.bad = true
		r.b = nil
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *metaReader) varint() int64 {
	u := r.uvarint()
	return int64(u>>1) ^ -int64(u&1)
}
