package parquetfile

import (
	"fmt"
	"io"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"google.golang.org/protobuf/proto"

	"orderlog/proto/orderlogpb"
)

// benchRows returns n messages with ~1 KiB JSON-like payloads (compressible
// as real payloads are), 8 topics, keys, message ids and a header.
func benchRows(n int) ([]*orderlogpb.StoredMessage, int64) {
	rng := rand.New(rand.NewPCG(5, 5))
	msgs := make([]*orderlogpb.StoredMessage, n)
	var size int64
	for i := range msgs {
		payload := make([]byte, 0, 1100)
		for len(payload) < 1000 {
			payload = fmt.Appendf(payload, `{"user":%d,"item":"sku-%06d","qty":%d,"price":%d.%02d},`,
				rng.IntN(100000), rng.IntN(1000000), rng.IntN(10), rng.IntN(1000), rng.IntN(100))
		}
		off := uint64(1_000_000 + i)
		msgs[i] = &orderlogpb.StoredMessage{
			Offset: off, ProducerId: uint64(1 + i%4), ProducerSeq: off, IngestTimeUs: 1_760_000_000_000_000 + int64(i),
			Message: &orderlogpb.Message{
				Topic:        fmt.Sprintf("orders-%d", i%8),
				Key:          fmt.Appendf(nil, "customer-%d", rng.IntN(50000)),
				Value:        payload[:1024],
				MessageId:    fmt.Appendf(nil, "%016x", rng.Uint64()),
				ClientTimeUs: 1_760_000_000_000_000 + int64(i) - 500,
				Headers:      []*orderlogpb.Header{{Key: "content-type", Value: []byte("application/json")}},
			},
		}
		size += int64(proto.Size(msgs[i]))
	}
	return msgs, size
}

// referenceWrite writes msgs with plain arrow-go: the archive's schema and
// writer properties, rows appended straight into Arrow builders and handed
// to pqarrow in batches, without this package's checks, holes or digest.
// It is the baseline the writer (and later the tiering bench) is measured
// against.
func referenceWrite(w io.Writer, msgs []*orderlogpb.StoredMessage, o WriterOptions) error {
	if err := o.Validate(); err != nil {
		return err
	}
	fw, err := pqarrow.NewFileWriter(archiveSchema, w, writerProperties(o), pqarrow.DefaultWriterProps())
	if err != nil {
		return err
	}
	rb := array.NewRecordBuilder(memory.DefaultAllocator, archiveSchema)
	defer rb.Release()
	offset := rb.Field(fieldLogOffset).(*array.Int64Builder)
	topic := rb.Field(fieldTopic).(*array.StringBuilder)
	key := rb.Field(fieldKey).(*array.BinaryBuilder)
	producerID := rb.Field(fieldProducerID).(*array.Int64Builder)
	producerSeq := rb.Field(fieldProducerSeq).(*array.Int64Builder)
	messageID := rb.Field(fieldMessageID).(*array.BinaryBuilder)
	ingestTime := rb.Field(fieldIngestTime).(*array.TimestampBuilder)
	clientTime := rb.Field(fieldClientTime).(*array.TimestampBuilder)
	payload := rb.Field(fieldPayload).(*array.BinaryBuilder)
	headers := rb.Field(fieldHeaders).(*array.ListBuilder)
	header := headers.ValueBuilder().(*array.StructBuilder)
	headerKey := header.FieldBuilder(0).(*array.StringBuilder)
	headerValue := header.FieldBuilder(1).(*array.BinaryBuilder)
	schemaVersion := rb.Field(fieldSchemaVersion).(*array.Int32Builder)
	schemaID := rb.Field(fieldSchemaID).(*array.Int64Builder)
	flush := func() error {
		rec := rb.NewRecordBatch()
		defer rec.Release()
		return fw.WriteBuffered(rec)
	}
	for i, m := range msgs {
		msg := m.Message
		offset.Append(int64(m.Offset))
		topic.Append(msg.Topic)
		if len(msg.Key) > 0 {
			key.Append(msg.Key)
		} else {
			key.AppendNull()
		}
		producerID.Append(int64(m.ProducerId))
		producerSeq.Append(int64(m.ProducerSeq))
		if len(msg.MessageId) > 0 {
			messageID.Append(msg.MessageId)
		} else {
			messageID.AppendNull()
		}
		ingestTime.Append(arrow.Timestamp(m.IngestTimeUs))
		if msg.ClientTimeUs != 0 {
			clientTime.Append(arrow.Timestamp(msg.ClientTimeUs))
		} else {
			clientTime.AppendNull()
		}
		payload.Append(msg.Value)
		headers.Append(true)
		for _, h := range msg.Headers {
			header.Append(true)
			headerKey.Append(h.Key)
			headerValue.Append(h.Value)
		}
		schemaVersion.AppendNull()
		if msg.SchemaId != 0 {
			schemaID.Append(int64(msg.SchemaId))
		} else {
			schemaID.AppendNull()
		}
		if (i+1)%o.BatchRows == 0 {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := flush(); err != nil {
		return err
	}
	return fw.Close()
}

// countWriter counts the bytes written to it.
type countWriter struct{ n int64 }

func (c *countWriter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }

// BenchmarkWriter writes 65,536 rows of 1 KiB payloads (one row group) per
// op with this package's Writer and with referenceWrite; MB/s counts the
// rows' protobuf size (what the hot path serves). file/proto is the
// compression ratio.
func BenchmarkWriter(b *testing.B) {
	const n = 64 * 1024
	msgs, size := benchRows(n)
	first, end := msgs[0].Offset, msgs[n-1].Offset+1
	b.Run("orderlog", func(b *testing.B) {
		b.SetBytes(size)
		var out countWriter
		for b.Loop() {
			out = countWriter{}
			w, err := NewWriter(&out, first, WriterOptions{})
			if err != nil {
				b.Fatal(err)
			}
			for _, m := range msgs {
				if err := w.Append(m); err != nil {
					b.Fatal(err)
				}
			}
			if _, err := w.Close(end); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(out.n)/float64(size), "file/proto")
	})
	b.Run("reference", func(b *testing.B) {
		b.SetBytes(size)
		var out countWriter
		for b.Loop() {
			out = countWriter{}
			if err := referenceWrite(&out, msgs, WriterOptions{}); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(out.n)/float64(size), "file/proto")
	})
}

// BenchmarkWriterVsReference alternates the two writers of BenchmarkWriter
// on the same rows within each op and reports the Writer's time over the
// reference's: on a machine shared with other loads a ratio of neighbours
// moves less than two separate timings.
func BenchmarkWriterVsReference(b *testing.B) {
	const n = 64 * 1024
	msgs, size := benchRows(n)
	first, end := msgs[0].Offset, msgs[n-1].Offset+1
	var writer, reference time.Duration
	b.SetBytes(2 * size)
	i := 0
	for b.Loop() {
		for k := range 2 {
			start := time.Now()
			if (i+k)%2 == 0 {
				w, err := NewWriter(&countWriter{}, first, WriterOptions{})
				if err != nil {
					b.Fatal(err)
				}
				for _, m := range msgs {
					if err := w.Append(m); err != nil {
						b.Fatal(err)
					}
				}
				if _, err := w.Close(end); err != nil {
					b.Fatal(err)
				}
				writer += time.Since(start)
			} else {
				if err := referenceWrite(&countWriter{}, msgs, WriterOptions{}); err != nil {
					b.Fatal(err)
				}
				reference += time.Since(start)
			}
		}
		i++
	}
	b.ReportMetric(writer.Seconds()/reference.Seconds(), "writer/reference")
}

// BenchmarkRead reads the benchmark rows back: the whole file, and 10 rows
// in the middle (a page-index seek).
func BenchmarkRead(b *testing.B) {
	const n = 64 * 1024
	msgs, size := benchRows(n)
	first, end := msgs[0].Offset, msgs[n-1].Offset+1
	data, _ := writeFile(b, first, end, msgs, WriterOptions{})
	f, err := openBytes(data)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("all", func(b *testing.B) {
		b.SetBytes(size)
		for b.Loop() {
			readAll(b, f, first, end)
		}
	})
	b.Run("10_rows", func(b *testing.B) {
		for b.Loop() {
			readAll(b, f, first+n/2, first+n/2+10)
		}
	})
}
