package main

import (
	"bufio"
	"context"
	"errors"
	"math/bits"
	"os"
	"runtime"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"google.golang.org/protobuf/proto"

	"orderlog/client"
	"orderlog/proto/orderlogpb"
	"orderlog/tiering/parquetfile"
)

// plainSchema is the archive's Arrow schema (tiering/parquetfile/schema.go),
// written out again: the reference shares no code with the writer it is
// measured against.
var plainSchema = arrow.NewSchema([]arrow.Field{
	{Name: "log_offset", Type: arrow.PrimitiveTypes.Int64},
	{Name: "topic", Type: arrow.BinaryTypes.String},
	{Name: "key", Type: arrow.BinaryTypes.Binary, Nullable: true},
	{Name: "producer_id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "producer_seq", Type: arrow.PrimitiveTypes.Int64},
	{Name: "message_id", Type: arrow.BinaryTypes.Binary, Nullable: true},
	{Name: "ingest_time", Type: arrow.FixedWidthTypes.Timestamp_us},
	{Name: "client_time", Type: arrow.FixedWidthTypes.Timestamp_us, Nullable: true},
	{Name: "payload", Type: arrow.BinaryTypes.Binary},
	{Name: "headers", Type: arrow.ListOfNonNullable(arrow.StructOf(
		arrow.Field{Name: "key", Type: arrow.BinaryTypes.String},
		arrow.Field{Name: "value", Type: arrow.BinaryTypes.Binary},
	))},
	{Name: "schema_version", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
	{Name: "schema_id", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
}, nil)

// plainProperties are the archive's writer settings
// (tiering/parquetfile/options.go with default WriterOptions): zstd level
// 1, statistics, page index, sorting column log_offset, dictionary on
// topic only, adaptive bloom filters on key and message_id (128 KiB at
// most, fpp 0.01, candidates down to 2 KiB), 64k-row groups, 64 KiB data
// pages.
func plainProperties() *parquet.WriterProperties {
	const maxBloom = 128 << 10 // 64k distinct values at fpp 0.01
	candidates := bits.Len64(maxBloom / 2048)
	return parquet.NewWriterProperties(
		parquet.WithCompression(compress.Codecs.Zstd),
		parquet.WithCompressionLevel(parquetfile.DefaultZstdLevel),
		parquet.WithStats(true),
		parquet.WithPageIndexEnabled(true),
		parquet.WithSortingColumns([]parquet.SortingColumn{{ColumnIdx: 0}}),
		parquet.WithDictionaryDefault(false),
		parquet.WithDictionaryFor("topic", true),
		parquet.WithMaxBloomFilterBytes(maxBloom),
		parquet.WithBloomFilterEnabledFor("key", true),
		parquet.WithAdaptiveBloomFilterEnabledFor("key", true),
		parquet.WithBloomFilterCandidatesFor("key", candidates),
		parquet.WithBloomFilterFPPFor("key", parquetfile.DefaultBloomFPP),
		parquet.WithBloomFilterEnabledFor("message_id", true),
		parquet.WithAdaptiveBloomFilterEnabledFor("message_id", true),
		parquet.WithBloomFilterCandidatesFor("message_id", candidates),
		parquet.WithBloomFilterFPPFor("message_id", parquetfile.DefaultBloomFPP),
		parquet.WithMaxRowGroupLength(parquetfile.DefaultRowGroupRows),
		parquet.WithDataPageSize(parquetfile.DefaultDataPageBytes),
	)
}

// fileWriter is one of the two writers measured: it appends rows to the
// current file and closes it.
type fileWriter interface {
	append(msgs []*orderlogpb.StoredMessage) error
	close(end uint64) error
}

// plainWriter is a plain arrow-go pqarrow writer: rows go straight into
// Arrow builders, handed to pqarrow every parquetfile.DefaultBatchRows
// rows, without the archive's checks, holes, digest or footer key-values.
type plainWriter struct {
	out     *bufio.Writer
	fw      *pqarrow.FileWriter
	rb      *array.RecordBuilder
	pending int
}

func newPlainWriter(f *os.File) (*plainWriter, error) {
	out := bufio.NewWriterSize(f, 256<<10)
	fw, err := pqarrow.NewFileWriter(plainSchema, out, plainProperties(), pqarrow.DefaultWriterProps())
	if err != nil {
		return nil, err
	}
	return &plainWriter{out: out, fw: fw, rb: array.NewRecordBuilder(memory.DefaultAllocator, plainSchema)}, nil
}

func (w *plainWriter) append(msgs []*orderlogpb.StoredMessage) error {
	rb := w.rb
	headers := rb.Field(9).(*array.ListBuilder)
	header := headers.ValueBuilder().(*array.StructBuilder)
	for _, m := range msgs {
		msg := m.Message
		rb.Field(0).(*array.Int64Builder).Append(int64(m.Offset))
		rb.Field(1).(*array.StringBuilder).Append(msg.Topic)
		appendOrNull(rb.Field(2).(*array.BinaryBuilder), msg.Key)
		rb.Field(3).(*array.Int64Builder).Append(int64(m.ProducerId))
		rb.Field(4).(*array.Int64Builder).Append(int64(m.ProducerSeq))
		appendOrNull(rb.Field(5).(*array.BinaryBuilder), msg.MessageId)
		rb.Field(6).(*array.TimestampBuilder).Append(arrow.Timestamp(m.IngestTimeUs))
		if msg.ClientTimeUs != 0 {
			rb.Field(7).(*array.TimestampBuilder).Append(arrow.Timestamp(msg.ClientTimeUs))
		} else {
			rb.Field(7).(*array.TimestampBuilder).AppendNull()
		}
		rb.Field(8).(*array.BinaryBuilder).Append(msg.Value)
		headers.Append(true)
		for _, h := range msg.Headers {
			header.Append(true)
			header.FieldBuilder(0).(*array.StringBuilder).Append(h.Key)
			header.FieldBuilder(1).(*array.BinaryBuilder).Append(h.Value)
		}
		rb.Field(10).(*array.Int32Builder).AppendNull()
		if msg.SchemaId != 0 {
			rb.Field(11).(*array.Int64Builder).Append(int64(msg.SchemaId))
		} else {
			rb.Field(11).(*array.Int64Builder).AppendNull()
		}
		if w.pending++; w.pending == parquetfile.DefaultBatchRows {
			if err := w.flush(); err != nil {
				return err
			}
		}
	}
	return nil
}

func appendOrNull(b *array.BinaryBuilder, v []byte) {
	if len(v) == 0 {
		b.AppendNull()
		return
	}
	b.Append(v)
}

func (w *plainWriter) flush() error {
	if w.pending == 0 {
		return nil
	}
	rec := w.rb.NewRecordBatch()
	defer rec.Release()
	w.pending = 0
	return w.fw.WriteBuffered(rec)
}

func (w *plainWriter) close(uint64) error {
	defer w.rb.Release()
	if err := w.flush(); err != nil {
		return err
	}
	if err := w.fw.Close(); err != nil {
		return err
	}
	return w.out.Flush()
}

// archiveWriter is tiering/parquetfile's Writer, as the tiering worker
// uses it (default WriterOptions).
type archiveWriter struct{ w *parquetfile.Writer }

func newArchiveWriter(f *os.File, first uint64) (*archiveWriter, error) {
	w, err := parquetfile.NewWriter(f, first, parquetfile.WriterOptions{})
	return &archiveWriter{w}, err
}

// append appends msgs and waits for their encoding, which the Writer does
// on another goroutine while it collects the next rows: the time is the
// Writer's, not the plain writer's that runs next.
func (a *archiveWriter) append(msgs []*orderlogpb.StoredMessage) error {
	for _, m := range msgs {
		if err := a.w.Append(m); err != nil {
			return err
		}
	}
	return a.w.Wait()
}

func (a *archiveWriter) close(end uint64) error {
	_, err := a.w.Close(end)
	return err
}

// timedWriter is one writer's files and the time spent in it.
type timedWriter struct {
	name    string
	open    func(f *os.File, first uint64) (fileWriter, error)
	path    string
	f       *os.File
	w       fileWriter
	elapsed time.Duration
	cpu     time.Duration // of the thread running it (encodeRound holds one)
	bytes   int64         // file bytes written
	files   int
}

func (t *timedWriter) append(chunk []*orderlogpb.StoredMessage) error {
	start, cpu := time.Now(), threadCPU()
	defer func() { t.elapsed, t.cpu = t.elapsed+time.Since(start), t.cpu+threadCPU()-cpu }()
	if t.w == nil {
		var err error
		if t.f, err = os.Create(t.path); err != nil {
			return err
		}
		if t.w, err = t.open(t.f, chunk[0].Offset); err != nil {
			return err
		}
	}
	return t.w.append(chunk)
}

// cut closes the current file at end (timed) and removes it (not timed).
func (t *timedWriter) cut(end uint64) error {
	if t.w == nil {
		return nil
	}
	start, cpu := time.Now(), threadCPU()
	err := t.w.close(end)
	t.elapsed, t.cpu = t.elapsed+time.Since(start), t.cpu+threadCPU()-cpu
	if st, serr := t.f.Stat(); serr == nil {
		t.bytes += st.Size()
	}
	t.f.Close()
	os.Remove(t.path)
	t.w, t.files = nil, t.files+1
	return err
}

// encodeResult is one round of both writers over the same rows.
type encodeResult struct {
	rows                  int64
	protoBytes            int64
	plain, archive        time.Duration
	plainCPU              time.Duration // the plain writer's thread's
	plainFile, archiveOut int64
	files                 int
}

// errEnough ends a read at the round's last row.
var errEnough = errors.New("enough rows")

// encodeRound reads rows [0, end) from orderlog through the client (not
// timed) in chunks and hands each chunk to both writers in turn (timed;
// the order alternates by chunk), into files in dir cut as the tiering
// worker cuts them (after the row that brings a file to fileBytes of
// protobuf). The files are removed as they are closed.
func encodeRound(ctx context.Context, c *client.Client, end uint64, fileBytes int64, dir string) (encodeResult, error) {
	runtime.LockOSThread() // the writers run here (Read's callback): their thread's CPU time is theirs
	defer runtime.UnlockOSThread()
	writers := []*timedWriter{
		{name: "plain", path: dir + "/plain.parquet", open: func(f *os.File, _ uint64) (fileWriter, error) { return newPlainWriter(f) }},
		{name: "parquetfile", path: dir + "/parquetfile.parquet", open: func(f *os.File, first uint64) (fileWriter, error) {
			return newArchiveWriter(f, first)
		}},
	}
	var res encodeResult
	var chunk []*orderlogpb.StoredMessage
	var fileSize int64
	nChunks := 0
	feed := func(endOfFile uint64) error {
		if len(chunk) > 0 {
			for i := range writers {
				if err := writers[(i+nChunks)%2].append(chunk); err != nil {
					return err
				}
			}
			nChunks++
			chunk = chunk[:0]
		}
		if endOfFile > 0 {
			for _, w := range writers {
				if err := w.cut(endOfFile); err != nil {
					return err
				}
			}
			fileSize = 0
		}
		return nil
	}
	err := c.Read(ctx, 0, 0, func(p *client.Page) error {
		for _, m := range p.Messages {
			if m.Offset >= end {
				return errEnough
			}
			size := int64(proto.Size(m))
			chunk = append(chunk, m)
			res.rows++
			res.protoBytes += size
			fileSize += size
			var cutAt uint64
			if fileSize >= fileBytes {
				cutAt = m.Offset + 1
			}
			if cutAt > 0 || len(chunk) == parquetfile.DefaultRowGroupRows {
				if err := feed(cutAt); err != nil {
					return err
				}
			}
		}
		if p.NextOffset >= end {
			return errEnough
		}
		return nil
	})
	if err != nil && !errors.Is(err, errEnough) {
		return res, err
	}
	if err := feed(end); err != nil {
		return res, err
	}
	res.plain, res.archive, res.plainCPU = writers[0].elapsed, writers[1].elapsed, writers[0].cpu
	res.plainFile, res.archiveOut, res.files = writers[0].bytes, writers[1].bytes, writers[1].files
	return res, nil
}
