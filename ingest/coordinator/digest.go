package coordinator

import (
	"crypto/sha256"
	"encoding/binary"
	"hash"

	"orderlog/ingest/batch"
	"orderlog/proto/orderlogpb"
)

// RequestDigest is the digest of an Idempotency-Key request's message, kept
// with its key so that a reuse of the key with another body is refused
// (IDEMPOTENCY_KEY_REUSED) rather than answered with the first one's
// offset. It covers what the log stores of the message — topic, key, value,
// headers in order, client time, schema id — and not its message id (the key itself),
// so it is computed alike from a request and from the record a rebuild
// reads: the first 8 bytes of SHA-256 over the fields, each length-prefixed.
// Never 0, which stands for "not known".
func RequestDigest(m *orderlogpb.Message) uint64 {
	d := newDigest()
	d.field([]byte(m.Topic))
	d.field(m.Key)
	d.field(m.Value)
	d.count(len(m.Headers))
	for _, h := range m.Headers {
		d.field([]byte(h.GetKey()))
		d.field(h.GetValue())
	}
	return d.sum(m.ClientTimeUs, m.SchemaId)
}

// recordDigest is RequestDigest of a logged record.
func recordDigest(r batch.Record) uint64 {
	d := newDigest()
	d.field([]byte(r.Topic))
	d.field(r.Key)
	d.field(r.Value)
	d.count(len(r.Headers))
	for _, h := range r.Headers {
		d.field([]byte(h.Key))
		d.field(h.Value)
	}
	return d.sum(r.ClientTimeMicros, r.SchemaID)
}

type digest struct {
	h   hash.Hash
	buf [binary.MaxVarintLen64]byte
}

func newDigest() *digest { return &digest{h: sha256.New()} }

func (d *digest) count(n int) { d.h.Write(binary.AppendUvarint(d.buf[:0], uint64(n))) }

func (d *digest) field(b []byte) {
	d.count(len(b))
	d.h.Write(b)
}

// sum ends the digest. A schema id of 0 adds nothing, so that digests
// kept in snapshots from before schema ids stay the same.
func (d *digest) sum(clientTime int64, schemaID uint32) uint64 {
	d.h.Write(binary.AppendVarint(d.buf[:0], clientTime))
	if schemaID != 0 {
		d.h.Write(binary.AppendUvarint(d.buf[:0], uint64(schemaID)))
	}
	var out [sha256.Size]byte
	return max(binary.LittleEndian.Uint64(d.h.Sum(out[:0])), 1)
}
