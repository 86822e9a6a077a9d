package grpcopt

import (
	"math/bits"
	"sync"

	"google.golang.org/grpc/mem"
)

// Buffer classes are powers of two from 2^minClassBits to 2^maxClassBits
// bytes; larger buffers are not pooled.
const (
	minClassBits = 8
	maxClassBits = 26
)

// bufferPool is a mem.BufferPool with one class per power of two that does
// not zero what it hands out. gRPC's default pool jumps from 32 KiB to
// 1 MiB and clears the whole buffer on every Get, so each 64 KiB produce
// frame or WAL entry cost a 1 MiB memclr; here a buffer is at most twice its
// length and is never cleared. That is safe because gRPC only hands a buffer
// on after filling its whole length from the wire or from an encoder.
type bufferPool struct {
	classes [maxClassBits + 1]sync.Pool
}

var _ mem.BufferPool = (*bufferPool)(nil)

// sharedPool serves every server and client of the process.
var sharedPool = &bufferPool{}

// classOf returns the smallest class holding n bytes.
func classOf(n int) int {
	if n <= 1<<minClassBits {
		return minClassBits
	}
	return bits.Len(uint(n - 1))
}

func (p *bufferPool) Get(length int) *[]byte {
	class := classOf(length)
	if class > maxClassBits {
		b := make([]byte, length)
		return &b
	}
	if b, ok := p.classes[class].Get().(*[]byte); ok {
		*b = (*b)[:length]
		return b
	}
	b := make([]byte, length, 1<<class)
	return &b
}

func (p *bufferPool) Put(b *[]byte) {
	c := cap(*b)
	if c < 1<<minClassBits || c > 1<<maxClassBits || c&(c-1) != 0 {
		return // not one of ours (or unpooled): let the GC have it
	}
	p.classes[bits.Len(uint(c))-1].Put(b)
}

// GetBuffer returns an empty buffer with room for n bytes from the shared
// pool, for data that is built here and handed back with PutBuffer once
// nothing refers to it (ledger entry payloads).
func GetBuffer(n int) []byte { return (*sharedPool.Get(n))[:0] }

// PutBuffer returns b to the shared pool; a buffer that did not come from
// it is left to the garbage collector.
func PutBuffer(b []byte) { sharedPool.Put(&b) }
