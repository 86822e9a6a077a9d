package partition

import (
	"hash/fnv"
	"testing"
)

// The mapping is public: these values must never change.
func TestOfIsFNV1a64ModPartitions(t *testing.T) {
	cases := []struct {
		key        string
		partitions uint32
		want       uint32
	}{
		{"", 16, 0},
		{"a", 16, 12},
		{"user-42", 16, 11},
		{"user-42", 1, 0},
		{"user-42", 0, 0},
	}
	for _, tc := range cases {
		if got := Of([]byte(tc.key), tc.partitions); got != tc.want {
			t.Errorf("Of(%q, %d) = %d, want %d", tc.key, tc.partitions, got, tc.want)
		}
	}
	for _, key := range []string{"a", "user-42", "\xff\x00", "orders/2024/17"} {
		h := fnv.New64a()
		h.Write([]byte(key))
		for _, n := range []uint32{2, 3, 16, 1000, Max} {
			if got, want := Of([]byte(key), n), uint32(h.Sum64()%uint64(n)); got != want {
				t.Errorf("Of(%q, %d) = %d, hash/fnv says %d", key, n, got, want)
			}
		}
	}
}

func TestOfSpreadsKeys(t *testing.T) {
	counts := make([]int, Default)
	for i := range 16000 {
		counts[Of([]byte{byte(i), byte(i >> 8), 'k'}, Default)]++
	}
	for p, n := range counts {
		if n < 500 || n > 1500 {
			t.Errorf("partition %d got %d of 16000 keys", p, n)
		}
	}
}

func TestSetHoldsTheKeysOfItsPartitions(t *testing.T) {
	s := NewSet(40, 0, 3, 39, 40, 77)
	for p := uint32(0); p < 45; p++ {
		want := p == 0 || p == 3 || p == 39
		if s.Has(p) != want {
			t.Fatalf("Has(%d) = %v, want %v", p, s.Has(p), want)
		}
	}
	for i := range 1000 {
		key := []byte{byte(i), byte(i >> 8), 'k'}
		if s.Holds(key) != s.Has(Of(key, 40)) {
			t.Fatalf("key %x: Holds disagrees with Has(Of)", key)
		}
	}
	var none *Set
	if none.Holds(nil) || none.Has(0) || none.Count() != 0 {
		t.Fatal("the nil set holds something")
	}
}
