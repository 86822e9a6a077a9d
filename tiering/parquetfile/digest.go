package parquetfile

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"

	"orderlog/proto/orderlogpb"
)

// The digest (footer key orderlog.digest) is "sha256:" followed by the
// lower-case hex SHA-256 of the concatenation, in offset order, of every
// row's canonical encoding. A row's canonical encoding is its columns in
// schema order, each as below (u32 and u64/i64 are little-endian; a
// "bytes" is u32 length then the bytes; a "presence" byte is 0x00 for null,
// 0x01 for present, and the value follows only when present):
//
//	log_offset      i64
//	topic           bytes (UTF-8)
//	key             presence, bytes          (null when the message has no key)
//	producer_id     i64
//	producer_seq    i64
//	message_id      presence, bytes          (null when empty)
//	ingest_time     i64 (µs since the Unix epoch, UTC)
//	client_time     presence, i64 (µs)       (null when the client gave 0)
//	payload         bytes
//	headers         u32 count, then per header: key bytes, value bytes
//	schema flags    1 byte: bit 0 schema_version present, bit 1 schema_id
//	                present, the other bits 0
//	schema_version  i32 (4 bytes)            only when present
//	schema_id       i64 (8 bytes)            only when present (format version 2)
//
// In format version 1 every schema_version is null and there is no
// schema_id column, so the flags byte is 0x00: the presence byte of
// schema_version as version 1 defined it. A version 1 file verifies as it
// did, and the same rows without schema ids have the same digest in both
// versions (a re-put of a version 1 object as version 2 compares equal).
//
// No separator, no row count and no trailer: the encoding is self-delimiting.
// An empty file (only holes) has the digest of zero bytes. The same
// definition is in docs/format/archive.md and duckcheck/check.mjs.

// rowDigest accumulates the canonical encoding of rows.
type rowDigest struct {
	h       hash.Hash
	scratch []byte
}

func newRowDigest() *rowDigest { return &rowDigest{h: sha256.New()} }

// Bits of the schema flags byte.
const (
	schemaVersionPresent = 1 << 0
	schemaIDPresent      = 1 << 1
)

// add feeds the canonical encoding of m's row, whose schema_version is
// schemaVersion (0: null). m must be valid for Append.
func (d *rowDigest) add(m *orderlogpb.StoredMessage, schemaVersion int32) {
	msg := m.GetMessage()
	b := d.scratch[:0]
	b = binary.LittleEndian.AppendUint64(b, m.GetOffset())
	b = appendString(b, msg.GetTopic())
	b = appendNullableBytes(b, msg.GetKey())
	b = binary.LittleEndian.AppendUint64(b, m.GetProducerId())
	b = binary.LittleEndian.AppendUint64(b, m.GetProducerSeq())
	b = appendNullableBytes(b, msg.GetMessageId())
	b = binary.LittleEndian.AppendUint64(b, uint64(m.GetIngestTimeUs()))
	if t := msg.GetClientTimeUs(); t != 0 {
		b = append(b, 1)
		b = binary.LittleEndian.AppendUint64(b, uint64(t))
	} else {
		b = append(b, 0)
	}
	// The payload is hashed in place rather than copied into scratch.
	b = binary.LittleEndian.AppendUint32(b, uint32(len(msg.GetValue())))
	d.h.Write(b)
	d.h.Write(msg.GetValue())
	b = binary.LittleEndian.AppendUint32(b[:0], uint32(len(msg.GetHeaders())))
	for _, h := range msg.GetHeaders() {
		b = appendString(b, h.GetKey())
		b = appendBytes(b, h.GetValue())
	}
	b = appendSchema(b, schemaVersion, msg.GetSchemaId())
	d.h.Write(b)
	d.scratch = b[:0]
}

// sum returns the digest as it is written in the footer.
func (d *rowDigest) sum() string {
	return digestPrefix + hex.EncodeToString(d.h.Sum(nil))
}

// appendSchema appends the schema flags byte and the values present.
func appendSchema(b []byte, schemaVersion int32, schemaID uint32) []byte {
	var flags byte
	if schemaVersion != 0 {
		flags |= schemaVersionPresent
	}
	if schemaID != 0 {
		flags |= schemaIDPresent
	}
	b = append(b, flags)
	if schemaVersion != 0 {
		b = binary.LittleEndian.AppendUint32(b, uint32(schemaVersion))
	}
	if schemaID != 0 {
		b = binary.LittleEndian.AppendUint64(b, uint64(schemaID))
	}
	return b
}

func appendBytes(b, v []byte) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(v)))
	return append(b, v...)
}

func appendString(b []byte, v string) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(v)))
	return append(b, v...)
}

func appendNullableBytes(b, v []byte) []byte {
	if len(v) == 0 {
		return append(b, 0)
	}
	return appendBytes(append(b, 1), v)
}

// Digest is the footer digest of rows msgs, in the order given (a file's
// rows are in offset order): to check an archive file against the rows
// another reader (orderlog's own read of the range) returns. A row's
// schema_version is schemaVersions[i] (0: null); nil means all null.
func Digest(msgs []*orderlogpb.StoredMessage, schemaVersions []int32) string {
	d := newRowDigest()
	for i, m := range msgs {
		var v int32
		if schemaVersions != nil {
			v = schemaVersions[i]
		}
		d.add(m, v)
	}
	return d.sum()
}
