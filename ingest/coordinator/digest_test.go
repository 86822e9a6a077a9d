package coordinator

import (
	"testing"

	"orderlog/ingest/batch"
	"orderlog/proto/orderlogpb"
)

// A key reused with another schema id is another body; without a schema id
// the digest is what it was before schema ids, and a record digests as its
// request does.
func TestRequestDigestCoversTheSchemaID(t *testing.T) {
	m := &orderlogpb.Message{Topic: "t", Key: []byte("k"), Value: []byte("v"), ClientTimeUs: 5}
	without := RequestDigest(m)
	// Before schema ids: topic, key, value, header count, client time.
	d := newDigest()
	d.field([]byte("t"))
	d.field([]byte("k"))
	d.field([]byte("v"))
	d.count(0)
	if old := d.sum(5, 0); without != old {
		t.Fatalf("digest without a schema id %x, want the old %x", without, old)
	}
	m.SchemaId = 3
	with := RequestDigest(m)
	if with == without {
		t.Fatal("a schema id does not change the digest")
	}
	if rec := batch.FromProto(m); recordDigest(rec) != with {
		t.Fatalf("record digest %x, request digest %x", recordDigest(rec), with)
	}
}
