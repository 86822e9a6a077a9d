package wal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"strconv"
	"strings"
)

// Segment file header (docs/format/wal.md §3):
//
//	0  [8]byte magic "OLWALSEG"
//	8  u32     version 1
//	12 u32     reserved, 0
//	16 u64     segment sequence number
//	24 u64     incarnation that wrote the segment
//	32 [16]byte store id
//	48 u32     crc32c of bytes [0, 48)
//	52 u32     reserved, 0
//	56         first record
const (
	segmentHeaderSize = 56
	segmentVersion    = 1
	segmentSuffix     = ".seg"
	indexSuffix       = ".idx"
)

var segmentMagic = [8]byte{'O', 'L', 'W', 'A', 'L', 'S', 'E', 'G'}

var errBadSegmentHeader = errors.New("wal: bad segment header")

type segmentHeader struct {
	seq         uint32
	incarnation uint64
	storeID     [16]byte
}

func encodeSegmentHeader(h segmentHeader) []byte {
	b := make([]byte, 0, segmentHeaderSize)
	b = append(b, segmentMagic[:]...)
	b = binary.LittleEndian.AppendUint32(b, segmentVersion)
	b = binary.LittleEndian.AppendUint32(b, 0)
	b = binary.LittleEndian.AppendUint64(b, uint64(h.seq))
	b = binary.LittleEndian.AppendUint64(b, h.incarnation)
	b = append(b, h.storeID[:]...)
	b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
	return binary.LittleEndian.AppendUint32(b, 0)
}

func decodeSegmentHeader(b []byte) (segmentHeader, error) {
	if len(b) < segmentHeaderSize || !bytes.Equal(b[:8], segmentMagic[:]) {
		return segmentHeader{}, errBadSegmentHeader
	}
	if crc32.Checksum(b[:48], castagnoli) != binary.LittleEndian.Uint32(b[48:]) {
		return segmentHeader{}, errBadSegmentHeader
	}
	if binary.LittleEndian.Uint32(b[8:]) != segmentVersion {
		return segmentHeader{}, fmt.Errorf("%w: version %d", errBadSegmentHeader, binary.LittleEndian.Uint32(b[8:]))
	}
	seq := binary.LittleEndian.Uint64(b[16:])
	if seq > 1<<32-1 {
		return segmentHeader{}, errBadSegmentHeader
	}
	h := segmentHeader{seq: uint32(seq), incarnation: binary.LittleEndian.Uint64(b[24:])}
	copy(h.storeID[:], b[32:48])
	return h, nil
}

func segmentName(seq uint32) string { return fmt.Sprintf("%016x%s", seq, segmentSuffix) }
func indexName(seq uint32) string   { return fmt.Sprintf("%016x%s", seq, indexSuffix) }

// parseFileName returns the sequence number of a segment or index file name.
func parseFileName(name, suffix string) (uint32, bool) {
	stem, ok := strings.CutSuffix(name, suffix)
	if !ok || len(stem) != 16 {
		return 0, false
	}
	seq, err := strconv.ParseUint(stem, 16, 32)
	return uint32(seq), err == nil
}
