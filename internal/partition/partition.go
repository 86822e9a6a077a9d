// Package partition owns the mapping of a message to its topic's virtual
// partition (DESIGN.md §11). orderlog has one global order; a partition is
// not a log of its own but the sub-sequence of a topic's messages whose key
// hashes to it, so every partition is read in global offset order and a
// key's messages all land in one partition.
//
// The mapping is part of the public API and of every stored message's
// meaning: it must never change. A topic's partition count is fixed when
// the topic is created. This package does no I/O.
package partition

// Default is the partition count of a topic created without one (also of
// a topic record written before topics had partitions).
const Default = 16

// Max bounds a topic's partition count.
const Max = 1024

// FNV-1a 64 parameters.
const (
	fnvOffset64 = 14695981039346656037
	fnvPrime64  = 1099511628211
)

// Of returns the partition of a message with this key in a topic of
// partitions partitions: FNV-1a 64 of the key bytes, modulo partitions. A
// message without a key (or with an empty one: they are stored alike) is
// in partition 0, so the rule needs nothing but the stored key; a
// partitions below 2 maps everything to 0.
func Of(key []byte, partitions uint32) uint32 {
	if len(key) == 0 || partitions < 2 {
		return 0
	}
	h := uint64(fnvOffset64)
	for _, b := range key {
		h ^= uint64(b)
		h *= fnvPrime64
	}
	return uint32(h % uint64(partitions))
}
