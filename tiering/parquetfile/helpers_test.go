package parquetfile

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"testing"

	"orderlog/proto/orderlogpb"
)

// genOptions shape the messages genMessages makes.
type genOptions struct {
	first, end  uint64
	holeChance  float64 // chance that an offset is a hole
	topics      int
	payloadSize int // max payload bytes (random 0..payloadSize)
	keyChance   float64
}

// genMessages returns random messages at the non-hole offsets of
// [first, end): several topics, keys present and absent, headers with
// repeats and empty values, empty payloads, message ids, client times 0 and
// not.
func genMessages(rng *rand.Rand, o genOptions) []*orderlogpb.StoredMessage {
	var out []*orderlogpb.StoredMessage
	for off := o.first; off < o.end; off++ {
		if rng.Float64() < o.holeChance {
			continue
		}
		out = append(out, genMessage(rng, off, o))
	}
	return out
}

func genMessage(rng *rand.Rand, off uint64, o genOptions) *orderlogpb.StoredMessage {
	msg := &orderlogpb.Message{
		Topic: fmt.Sprintf("topic-%d", rng.IntN(max(o.topics, 1))),
		Value: randBytes(rng, rng.IntN(o.payloadSize+1)),
	}
	if rng.Float64() < o.keyChance {
		msg.Key = []byte(fmt.Sprintf("key-%d", rng.IntN(1000)))
	}
	if rng.IntN(2) == 0 {
		msg.MessageId = randBytes(rng, 1+rng.IntN(16))
	}
	if rng.IntN(2) == 0 {
		msg.ClientTimeUs = 1_700_000_000_000_000 + rng.Int64N(1e12)
	}
	for range rng.IntN(4) {
		k := []string{"trace", "content-type", "retry", ""}[rng.IntN(4)]
		msg.Headers = append(msg.Headers, &orderlogpb.Header{Key: k, Value: randBytes(rng, rng.IntN(3))})
	}
	// Schema ids from the offset, not the rng (the other values stay what
	// they were before messages had them): none, small, and above 2^31.
	msg.SchemaId = [4]uint32{0, 1, 7, 1<<31 + 5}[off%4]
	m := &orderlogpb.StoredMessage{
		Offset:       off,
		Message:      msg,
		IngestTimeUs: 1_700_000_000_000_000 + int64(off),
	}
	if rng.IntN(3) > 0 {
		m.ProducerId = 1 + uint64(rng.IntN(5))
		m.ProducerSeq = off * 2
	}
	return m
}

func randBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// holesOf computes the holes of [first, end) given the messages' offsets.
func holesOf(first, end uint64, msgs []*orderlogpb.StoredMessage) []Range {
	var holes []Range
	next := first
	for _, m := range msgs {
		if m.Offset > next {
			holes = append(holes, Range{next, m.Offset})
		}
		next = m.Offset + 1
	}
	if next < end {
		holes = append(holes, Range{next, end})
	}
	return holes
}

// writeFile writes msgs as an archive file of [first, end).
func writeFile(t testing.TB, first, end uint64, msgs []*orderlogpb.StoredMessage, o WriterOptions) ([]byte, Meta) {
	t.Helper()
	var buf bytes.Buffer
	w, err := NewWriter(&buf, first, o)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		if err := w.Append(m); err != nil {
			t.Fatal(err)
		}
	}
	meta, err := w.Close(end)
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), meta
}

// digestOf recomputes the footer digest from messages.
func digestOf(msgs []*orderlogpb.StoredMessage) string {
	d := newRowDigest()
	for _, m := range msgs {
		d.add(m, 0)
	}
	return d.sum()
}

// countingReaderAt records the byte ranges read.
type countingReaderAt struct {
	data []byte
	mu   sync.Mutex
	// reads are the [off, off+n) ranges read, in order.
	reads [][2]int64
}

func (c *countingReaderAt) ReadAt(p []byte, off int64) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := bytes.NewReader(c.data)
	n, err := r.ReadAt(p, off)
	c.reads = append(c.reads, [2]int64{off, off + int64(n)})
	return n, err
}

// reset forgets the reads so far.
func (c *countingReaderAt) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reads = nil
}

// bytesRead is the number of distinct bytes read since the last reset.
func (c *countingReaderAt) bytesRead() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	rs := append([][2]int64(nil), c.reads...)
	sort.Slice(rs, func(i, j int) bool { return rs[i][0] < rs[j][0] })
	var total, end int64
	for _, r := range rs {
		if r[1] <= end {
			continue
		}
		total += r[1] - max(r[0], end)
		end = r[1]
	}
	return total
}

// totalRead is the number of bytes read, counting repeats.
func (c *countingReaderAt) totalRead() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var n int64
	for _, r := range c.reads {
		n += r[1] - r[0]
	}
	return n
}
