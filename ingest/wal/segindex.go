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
//	40         count × 40-byte metas:
//	           u8 type, u8 0, u16 0, u32 size, u64 ledger, i64 entry, i64 lac, u64 offset
//	40+40n u32 crc32c of everything before it
const (
	indexHeaderSize = 40
	indexMetaSize   = 40
	indexVersion    = 1
)

var indexMagic = [8]byte{'O', 'L', 'W', 'A', 'L', 'I', 'D', 'X'}

var errBadIndex = errors.New("wal: bad index file")

// segmentIndex is the content of one index checkpoint. Encoding uses
// metas; decoding leaves the verified metas in raw, read with meta(i), so
// that loading a large store does not materialize them all.
type segmentIndex struct {
	seq         uint32
	incarnation uint64
	end         int64
	metas       []recordMeta
	raw         []byte
}

func encodeSegmentIndex(x *segmentIndex) []byte {
	b := make([]byte, 0, indexHeaderSize+indexMetaSize*len(x.metas)+4)
	b = append(b, indexMagic[:]...)
	b = binary.LittleEndian.AppendUint32(b, indexVersion)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(x.metas)))
	b = binary.LittleEndian.AppendUint64(b, uint64(x.seq))
	b = binary.LittleEndian.AppendUint64(b, x.incarnation)
	b = binary.LittleEndian.AppendUint64(b, uint64(x.end))
	for _, m := range x.metas {
		b = append(b, byte(m.Type), 0, 0, 0)
		b = binary.LittleEndian.AppendUint32(b, m.Size)
		b = binary.LittleEndian.AppendUint64(b, m.Ledger)
		b = binary.LittleEndian.AppendUint64(b, uint64(m.Entry))
		b = binary.LittleEndian.AppendUint64(b, uint64(m.LAC))
		b = binary.LittleEndian.AppendUint64(b, uint64(m.Offset))
	}
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// decodeSegmentIndex verifies an index checkpoint; its metas stay in raw.
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
	if len(body) != indexHeaderSize+count*indexMetaSize {
		return nil, errBadIndex
	}
	seq := binary.LittleEndian.Uint64(b[16:])
	if seq > 1<<32-1 {
		return nil, errBadIndex
	}
	return &segmentIndex{
		seq:         uint32(seq),
		incarnation: binary.LittleEndian.Uint64(b[24:]),
		end:         int64(binary.LittleEndian.Uint64(b[32:])),
		raw:         body[indexHeaderSize:],
	}, nil
}

func (x *segmentIndex) count() int { return len(x.raw) / indexMetaSize }

// meta decodes the i-th meta of a decoded checkpoint.
func (x *segmentIndex) meta(i int) recordMeta {
	m := x.raw[i*indexMetaSize : (i+1)*indexMetaSize]
	return recordMeta{
		Type:   RecordType(m[0]),
		Size:   binary.LittleEndian.Uint32(m[4:]),
		Ledger: binary.LittleEndian.Uint64(m[8:]),
		Entry:  int64(binary.LittleEndian.Uint64(m[16:])),
		LAC:    int64(binary.LittleEndian.Uint64(m[24:])),
		Offset: uint32(binary.LittleEndian.Uint64(m[32:])),
	}
}

// decodedMetas materializes every meta (tests and tools).
func (x *segmentIndex) decodedMetas() []recordMeta {
	metas := make([]recordMeta, x.count())
	for i := range metas {
		metas[i] = x.meta(i)
	}
	return metas
}
