package batch

import (
	"bytes"
	"testing"
)

// FuzzDecode: no input makes Decode panic, and whatever decodes cleanly
// re-encodes to the same bytes (the format has one encoding per batch).
func FuzzDecode(f *testing.F) {
	h, records := sampleBatch()
	good, _ := Encode(nil, h, records)
	f.Add(good)
	f.Add(good[:len(good)/2])
	f.Add(good[:headerFixedSize])
	records[0].SchemaID = 300
	withIDs, _ := Encode(nil, h, records)
	f.Add(withIDs)
	f.Add([]byte{})
	f.Add(bytes.Repeat([]byte{0xff}, 64))
	f.Fuzz(func(t *testing.T, buf []byte) {
		d, err := Decode(buf)
		if err != nil {
			return
		}
		decoded, err := d.All()
		if err != nil {
			return
		}
		again, err := Encode(nil, d.Header, decoded)
		if err != nil {
			t.Fatalf("decoded batch does not re-encode: %v", err)
		}
		if !bytes.Equal(again, buf) {
			t.Fatalf("re-encoding differs:\n got %x\nwant %x", again, buf)
		}
	})
}
