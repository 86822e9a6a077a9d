package batch

import (
	"bytes"
	"errors"
	"testing"
)

// A batch without schema ids is byte for byte what format version 1 wrote
// before they were added: byte 2 stays 0 and no record grows.
func TestABatchWithoutSchemaIDsKeepsItsBytes(t *testing.T) {
	h, records := sampleBatch()
	buf, err := Encode(nil, h, records)
	if err != nil {
		t.Fatal(err)
	}
	if buf[2] != 0 {
		t.Fatalf("flags %#x without schema ids; want 0", buf[2])
	}
	records[1].SchemaID = 9
	with, err := Encode(nil, h, records)
	if err != nil {
		t.Fatal(err)
	}
	if with[2] != flagSchemaIDs || len(with) != len(buf)+len(records) {
		t.Fatalf("with a schema id: flags %#x, %d bytes; want %#x and %d (one byte per record more)",
			with[2], len(with), flagSchemaIDs, len(buf)+len(records))
	}
}

func TestSchemaIDsRoundTrip(t *testing.T) {
	h, records := sampleBatch()
	records[0].SchemaID, records[2].SchemaID = 1, 1<<32-1
	buf, err := Encode(nil, h, records)
	if err != nil {
		t.Fatal(err)
	}
	d, err := Decode(buf)
	if err != nil {
		t.Fatal(err)
	}
	got, err := d.All()
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []uint32{1, 0, 1<<32 - 1} {
		if got[i].SchemaID != want {
			t.Errorf("record %d: schema id %d, want %d", i, got[i].SchemaID, want)
		}
	}
	if m := ToProto(&got[2]); m.SchemaId != 1<<32-1 || FromProto(m).SchemaID != 1<<32-1 {
		t.Errorf("proto conversion lost the schema id: %d", m.SchemaId)
	}
}

// The flag with every schema id 0 is a second encoding of a batch without
// them: refused, so that a batch has one encoding.
func TestTheSchemaIDFlagWithoutSchemaIDsIsCorrupt(t *testing.T) {
	h, records := sampleBatch()
	records[0].SchemaID = 1
	buf, err := Encode(nil, h, records)
	if err != nil {
		t.Fatal(err)
	}
	// Record 0 ends with its message id "m1", then its schema id.
	idAt := bytes.Index(buf, []byte("m1")) + len("m1")
	if buf[idAt] != 1 {
		t.Fatalf("byte %d is %d, want record 0's schema id 1", idAt, buf[idAt])
	}
	buf[idAt] = 0
	d, err := Decode(buf)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.All(); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("all schema ids 0 under the flag: %v, want ErrCorrupt", err)
	}
	buf[2] = 2
	if _, err := Decode(buf); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("unknown flag bit: %v, want ErrCorrupt", err)
	}
}
