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
//	schema_version  presence, i32 (4 bytes)  (always null in format version 1)
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

// add feeds the canonical encoding of m's row. m must be valid for Append.
func (d *rowDigest) add(m *orderlogpb.StoredMessage) {
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
	b = append(b, 0) // schema_version: null
	d.h.Write(b)
	d.scratch = b[:0]
}

// sum returns the digest as it is written in the footer.
func (d *rowDigest) sum() string {
	return digestPrefix + hex.EncodeToString(d.h.Sum(nil))
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
// another reader (orderlog's own read of the range) returns.
func Digest(msgs []*orderlogpb.StoredMessage) string {
	d := newRowDigest()
	for _, m := range msgs {
		d.add(m)
	}
	return d.sum()
}
