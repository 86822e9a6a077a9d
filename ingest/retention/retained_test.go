package retention

import (
	"slices"
	"testing"
)

func TestIndexRoundTrips(t *testing.T) {
	spans := []IndexSpan{{0, 1}, {5, 9}, {9, 10}, {1 << 40, 1<<40 + 3}}
	got, err := DecodeIndex(EncodeIndex(spans))
	if err != nil || !slices.Equal(got, spans) {
		t.Fatalf("%v, %v", got, err)
	}
	for name, bad := range map[string][]byte{
		"magic":    []byte("OLRX\x01\x00"),
		"version":  []byte("OLRI\x02\x00"),
		"count":    []byte("OLRI\x01\x05\x00\x01"),
		"empty":    []byte("OLRI\x01\x01\x00\x00"),
		"trailing": append(EncodeIndex(spans), 0),
	} {
		if _, err := DecodeIndex(bad); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
}

// FuzzDecodeIndex: any bytes either fail to decode or decode to ordered,
// non-empty spans that encode back to the same bytes.
func FuzzDecodeIndex(f *testing.F) {
	f.Add(EncodeIndex([]IndexSpan{{0, 1}, {5, 9}}))
	f.Add(EncodeIndex(nil))
	f.Add([]byte("OLRI\x01\xff\xff\xff\xff\x0f"))
	f.Fuzz(func(t *testing.T, data []byte) {
		spans, err := DecodeIndex(data)
		if err != nil {
			return
		}
		var end uint64
		for _, s := range spans {
			if s.First < end || s.End <= s.First {
				t.Fatalf("spans %v", spans)
			}
			end = s.End
		}
		if again := EncodeIndex(spans); string(again) != string(data) {
			t.Fatalf("re-encodes differently")
		}
	})
}
