package partition

// Set is a set of a topic's virtual partitions, for a topic of Count
// partitions. The nil *Set holds nothing.
type Set struct {
	count uint32
	bits  []uint64
}

// NewSet returns the set of the given partitions of a topic of count
// partitions; partitions at or beyond count are left out.
func NewSet(count uint32, partitions ...uint32) *Set {
	s := &Set{count: count, bits: make([]uint64, (count+63)/64)}
	for _, p := range partitions {
		if p < count {
			s.bits[p/64] |= 1 << (p % 64)
		}
	}
	return s
}

// Count is the topic's partition count.
func (s *Set) Count() uint32 {
	if s == nil {
		return 0
	}
	return s.count
}

// Has reports whether partition p is in the set.
func (s *Set) Has(p uint32) bool {
	return s != nil && p < s.count && s.bits[p/64]&(1<<(p%64)) != 0
}

// Holds reports whether a message with this key is in one of the set's
// partitions.
func (s *Set) Holds(key []byte) bool { return s != nil && s.Has(Of(key, s.count)) }
