package batch

import (
	"encoding/binary"
	"fmt"

	"orderlog/ingest/producer"
)

// KindProducerSnapshot is the producer table of a ledger's writer, the first
// entry of every ingest ledger (DESIGN.md §6), so a producer's state can be
// rebuilt from the ledgers after the one that holds its last snapshot.
const KindProducerSnapshot Kind = 2

// snapshotDigests is the snapshot header's flag (byte 2) saying that every
// producer's keys are followed by their request digests. It is set exactly
// when some producer has digests, so a snapshot has one encoding.
const snapshotDigests = 1

// EncodeSnapshot appends a producer-table snapshot to dst. The fixed header
// is that of a record batch with no offsets and no records, but for its
// flags byte (snapshotDigests).
func EncodeSnapshot(dst []byte, ingestTimeMicros int64, states []producer.State) ([]byte, error) {
	flags := byte(0)
	for _, s := range states {
		if len(s.Digests) > 0 {
			flags = snapshotDigests
		}
	}
	dst = append(dst, Version, byte(KindProducerSnapshot), flags, 0)
	dst = binary.LittleEndian.AppendUint64(dst, 0)
	dst = binary.LittleEndian.AppendUint32(dst, 0)
	dst = binary.LittleEndian.AppendUint64(dst, uint64(ingestTimeMicros))
	dst = binary.AppendUvarint(dst, uint64(len(states)))
	for _, s := range states {
		if uint64(len(s.Window)) > s.DurableNext {
			return nil, fmt.Errorf("batch: producer %d window of %d seqs below durable next %d", s.ID, len(s.Window), s.DurableNext)
		}
		if len(s.Keys) != 0 && len(s.Keys) != len(s.Window) {
			return nil, fmt.Errorf("batch: producer %d has %d keys for a window of %d", s.ID, len(s.Keys), len(s.Window))
		}
		if len(s.Digests) != 0 && len(s.Digests) != len(s.Keys) {
			return nil, fmt.Errorf("batch: producer %d has %d digests for %d keys", s.ID, len(s.Digests), len(s.Keys))
		}
		dst = binary.AppendUvarint(dst, s.ID)
		dst = binary.AppendUvarint(dst, s.Epoch)
		dst = binary.AppendUvarint(dst, s.DurableNext)
		dst = binary.AppendUvarint(dst, uint64(len(s.Window)))
		// A producer's offsets increase with its seqs (contract 2), so the
		// window is stored as its first offset and positive deltas.
		previous := uint64(0)
		for i, offset := range s.Window {
			if i > 0 && offset <= previous {
				return nil, fmt.Errorf("batch: producer %d window offsets do not increase", s.ID)
			}
			dst = binary.AppendUvarint(dst, offset-previous)
			previous = offset
		}
		dst = binary.AppendUvarint(dst, uint64(len(s.Keys)))
		for _, key := range s.Keys {
			dst = appendBytes(dst, []byte(key))
		}
		if flags&snapshotDigests != 0 {
			dst = binary.AppendUvarint(dst, uint64(len(s.Digests)))
			for _, d := range s.Digests {
				dst = binary.LittleEndian.AppendUint64(dst, d)
			}
		}
	}
	return dst, nil
}

// PeekKind returns the kind of an entry payload without decoding it.
func PeekKind(buf []byte) (Kind, error) {
	if len(buf) < headerFixedSize {
		return 0, fmt.Errorf("%w: %d bytes, header needs %d", ErrCorrupt, len(buf), headerFixedSize)
	}
	if buf[0] != Version {
		return 0, fmt.Errorf("%w: %d", ErrVersion, buf[0])
	}
	return Kind(buf[1]), nil
}

// DecodeSnapshot decodes a producer-table snapshot.
func DecodeSnapshot(buf []byte) (ingestTimeMicros int64, states []producer.State, err error) {
	kind, err := PeekKind(buf)
	if err != nil {
		return 0, nil, err
	}
	flags := buf[2]
	if kind != KindProducerSnapshot || flags&^snapshotDigests != 0 || buf[3] != 0 ||
		binary.LittleEndian.Uint64(buf[4:]) != 0 || binary.LittleEndian.Uint32(buf[12:]) != 0 {
		return 0, nil, fmt.Errorf("%w: not a producer snapshot header", ErrCorrupt)
	}
	ingestTimeMicros = int64(binary.LittleEndian.Uint64(buf[16:]))
	r := reader{buf: buf[headerFixedSize:]}
	count := r.uvarint()
	if count > uint64(len(r.buf))/4 { // each producer takes at least four bytes
		return 0, nil, fmt.Errorf("%w: %d producers in %d bytes", ErrCorrupt, count, len(r.buf))
	}
	states = make([]producer.State, 0, count)
	for i := uint64(0); i < count && r.err == nil; i++ {
		s := producer.State{ID: r.uvarint(), Epoch: r.uvarint(), DurableNext: r.uvarint()}
		windowLen := r.uvarint()
		if windowLen > s.DurableNext || windowLen > uint64(len(r.buf)) {
			return 0, nil, fmt.Errorf("%w: producer %d window of %d", ErrCorrupt, s.ID, windowLen)
		}
		offset := uint64(0)
		for j := uint64(0); j < windowLen && r.err == nil; j++ {
			delta := r.uvarint()
			if j > 0 && delta == 0 {
				return 0, nil, fmt.Errorf("%w: producer %d window offsets do not increase", ErrCorrupt, s.ID)
			}
			offset += delta
			s.Window = append(s.Window, offset)
		}
		keyCount := r.uvarint()
		if keyCount != 0 && keyCount != windowLen {
			return 0, nil, fmt.Errorf("%w: producer %d has %d keys for a window of %d", ErrCorrupt, s.ID, keyCount, windowLen)
		}
		for j := uint64(0); j < keyCount && r.err == nil; j++ {
			s.Keys = append(s.Keys, string(r.bytes()))
		}
		if flags&snapshotDigests != 0 {
			if s.Digests, err = r.digests(s.ID, keyCount); err != nil {
				return 0, nil, err
			}
		}
		states = append(states, s)
	}
	if r.err == nil && flags&snapshotDigests != 0 && !anyDigests(states) {
		r.err = fmt.Errorf("%w: digests flagged, none present", ErrCorrupt)
	}
	if r.err == nil && len(r.buf) != 0 {
		r.err = fmt.Errorf("%w: %d trailing bytes", ErrCorrupt, len(r.buf))
	}
	if r.err != nil {
		return 0, nil, r.err
	}
	return ingestTimeMicros, states, nil
}

// digests reads a producer's digest list: none, or one per key.
func (r *reader) digests(id, keyCount uint64) ([]uint64, error) {
	count := r.uvarint()
	if r.err != nil {
		return nil, r.err
	}
	if count != 0 && count != keyCount || count > uint64(len(r.buf))/8 {
		return nil, fmt.Errorf("%w: producer %d has %d digests for %d keys", ErrCorrupt, id, count, keyCount)
	}
	var digests []uint64
	for range count {
		digests = append(digests, binary.LittleEndian.Uint64(r.buf))
		r.buf = r.buf[8:]
	}
	return digests, nil
}

func anyDigests(states []producer.State) bool {
	for _, s := range states {
		if len(s.Digests) > 0 {
			return true
		}
	}
	return false
}
