//go:build !race

// The race detector changes allocation counts.

package batch

import "testing"

// Encode sizes its output once: the bound covers the encoding, so a batch
// costs one allocation however large it is.
func TestEncodeAllocatesOnce(t *testing.T) {
	h, records := sampleBatch()
	buf, err := Encode(nil, h, records)
	if err != nil {
		t.Fatal(err)
	}
	if bound := EncodedSizeBound(h, records); bound < len(buf) {
		t.Fatalf("size bound %d below the encoded size %d", bound, len(buf))
	}
	allocs := testing.AllocsPerRun(20, func() { _, _ = Encode(nil, h, records) })
	if allocs != 1 {
		t.Fatalf("Encode made %.0f allocations, want 1", allocs)
	}
}
