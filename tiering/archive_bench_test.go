package tiering

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"

	"orderlog/proto/orderlogpb"
	"orderlog/reader"
	"orderlog/tiering/parquetfile"
)

// benchMessages returns n messages like bench/tiering's: ~1 KiB JSON-like
// payloads, 8 topics, keys, a message id, a client time and a header.
func benchMessages(n int) []*orderlogpb.StoredMessage {
	rng := rand.New(rand.NewPCG(5, 5))
	msgs := make([]*orderlogpb.StoredMessage, n)
	for i := range msgs {
		payload := make([]byte, 0, 1100)
		for len(payload) < 1024 {
			payload = fmt.Appendf(payload, `{"user":%d,"item":"sku-%06d","qty":%d,"price":%d.%02d},`,
				rng.IntN(100000), rng.IntN(1000000), rng.IntN(10), rng.IntN(1000), rng.IntN(100))
		}
		off := uint64(i)
		msgs[i] = &orderlogpb.StoredMessage{
			Offset: off, ProducerId: uint64(1 + i%8), ProducerSeq: off, IngestTimeUs: 1_760_000_000_000_000 + int64(i),
			Message: &orderlogpb.Message{
				Topic: fmt.Sprintf("orders-%d", i%8), Key: fmt.Appendf(nil, "customer-%05d", rng.IntN(50000)),
				Value: payload[:1024], MessageId: fmt.Appendf(nil, "%016x", rng.Uint64()), ClientTimeUs: 1_760_000_000_000_000 + int64(i) - 500,
				Headers: []*orderlogpb.Header{{Key: "content-type", Value: []byte("application/json")}},
			},
		}
	}
	return msgs
}

// The benchmark's archive, built once per process (in the first run's
// temporary directory, which outlives the later runs of a -count).
var (
	benchArchiveOnce sync.Once
	benchArchiveMsgs []*orderlogpb.StoredMessage
	benchArchive     *testArchive
)

// BenchmarkArchiveRead reads a 200k-row archive through a reader as a
// node serves client.Read below the log start: pages of 1,000 messages,
// each marshalled as gRPC would. The block cache is warm after the first
// round.
func BenchmarkArchiveRead(b *testing.B) {
	const n = 200_000
	benchArchiveOnce.Do(func() {
		benchArchiveMsgs = benchMessages(n)
		benchArchive = buildArchive(b, benchArchiveMsgs, []uint64{0, 100_000, n}, parquetfile.WriterOptions{})
	})
	msgs, a := benchArchiveMsgs, benchArchive
	archive, err := NewArchiveReader(a.store, ReaderOptions{CacheDir: b.TempDir() + "/cache"})
	if err != nil {
		b.Fatal(err)
	}
	defer archive.Close()
	archive.noteHead(context.Background(), headValue(b, a.head))
	cold := coldReader(b, archive, n)
	var size int64
	for _, m := range msgs {
		size += int64(proto.Size(m))
	}
	b.SetBytes(size)
	for b.Loop() {
		got := 0
		err := cold.Stream(context.Background(), 0, 0, reader.Filter{}, false, func(p *orderlogpb.ReadResponse) error {
			got += len(p.Messages)
			_, err := proto.Marshal(p)
			return err
		})
		if err != nil || got != n {
			b.Fatalf("read %d messages: %v", got, err)
		}
	}
}
