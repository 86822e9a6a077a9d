package parquetfile

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"orderlog/proto/orderlogpb"
)

// Writer writes one archive file of an offset range that starts at first
// and ends where Close says. Append rows in strictly increasing offset
// order from first on; every offset of [first, end) without a row is a
// hole. Close writes the footer. A Writer is not safe for concurrent use.
type Writer struct {
	first uint64
	opts  WriterOptions
	out   *bufio.Writer
	fw    *pqarrow.FileWriter
	rows  *rowBuilder

	// next is the lowest offset the next row may have: the offsets of
	// [first, next) are rows or holes.
	next    uint64
	holes   []Range
	nrows   int64
	digest  *rowDigest
	pending int // rows in the builders, not yet handed to fw
	// err is set once the writer can no longer be used: after a failed
	// write to the io.Writer, and after Close.
	err error
}

// NewWriter starts an archive file whose range starts at first on w.
// Nothing is written to w until the first row group fills or Close; w is
// never closed. The range's end is given to Close: the tiering worker
// decides where a file ends (size, age, day) while it appends.
func NewWriter(w io.Writer, first uint64, o WriterOptions) (*Writer, error) {
	if first >= math.MaxInt64 {
		return nil, fmt.Errorf("%w: first offset %d does not fit log_offset", ErrInvalidRange, first)
	}
	if err := o.Validate(); err != nil {
		return nil, err
	}
	out := bufio.NewWriterSize(writerOnly{w}, 256<<10)
	fw, err := pqarrow.NewFileWriter(archiveSchema, out, writerProperties(o),
		pqarrow.NewArrowWriterProperties(pqarrow.WithAllocator(memory.DefaultAllocator)))
	if err != nil {
		return nil, fmt.Errorf("parquetfile: new writer: %w", err)
	}
	return &Writer{
		first:  first,
		opts:   o,
		out:    out,
		fw:     fw,
		rows:   newRowBuilder(),
		next:   first,
		digest: newRowDigest(),
	}, nil
}

// writerOnly hides any Close method of the io.Writer: arrow-go closes its
// sink when the file is closed, and the caller owns w.
type writerOnly struct{ io.Writer }

// Append adds m as the row at offset m.Offset. It returns ErrOutOfRange,
// ErrOutOfOrder or ErrInvalidMessage (and writes nothing) for a row that
// does not fit, ErrClosed after Close or a failed write.
func (w *Writer) Append(m *orderlogpb.StoredMessage) error {
	if w.err != nil {
		return w.err
	}
	if err := w.check(m); err != nil {
		return err
	}
	if o := m.GetOffset(); o > w.next {
		w.holes = append(w.holes, Range{First: w.next, End: o})
	}
	w.rows.append(m)
	w.digest.add(m)
	w.nrows++
	w.next = m.GetOffset() + 1
	if w.pending++; w.pending >= w.opts.BatchRows {
		return w.flush()
	}
	return nil
}

// check returns why m cannot be the next row, or nil.
func (w *Writer) check(m *orderlogpb.StoredMessage) error {
	if m == nil || m.GetMessage() == nil {
		return fmt.Errorf("%w: no message", ErrInvalidMessage)
	}
	o := m.GetOffset()
	switch {
	case o < w.first || o >= math.MaxInt64:
		return fmt.Errorf("%w: offset %d, range from %d", ErrOutOfRange, o, w.first)
	case o < w.next:
		return fmt.Errorf("%w: offset %d after %d", ErrOutOfOrder, o, w.next-1)
	case m.GetProducerId() > math.MaxInt64 || m.GetProducerSeq() > math.MaxInt64:
		return fmt.Errorf("%w: offset %d: producer id %d or sequence %d above 2^63-1",
			ErrInvalidMessage, o, m.GetProducerId(), m.GetProducerSeq())
	case !utf8.ValidString(m.GetMessage().GetTopic()):
		return fmt.Errorf("%w: offset %d: topic is not UTF-8", ErrInvalidMessage, o)
	}
	for _, h := range m.GetMessage().GetHeaders() {
		if !utf8.ValidString(h.GetKey()) {
			return fmt.Errorf("%w: offset %d: header key is not UTF-8", ErrInvalidMessage, o)
		}
	}
	return nil
}

// flush hands the rows in the builders to the Parquet writer, which encodes
// them into the current row group and starts a new one every RowGroupRows.
func (w *Writer) flush() error {
	if w.pending == 0 {
		return nil
	}
	rec := w.rows.newRecord()
	defer rec.Release()
	w.pending = 0
	if err := w.fw.WriteBuffered(rec); err != nil {
		return w.fail(fmt.Errorf("parquetfile: write rows: %w", err))
	}
	return nil
}

// fail makes the writer unusable after err (nil: after a good Close).
func (w *Writer) fail(err error) error {
	w.err = ErrClosed
	if err != nil {
		w.err = fmt.Errorf("%w: %w", ErrClosed, err)
	}
	w.rows.release()
	return err
}

// Close ends the file's range at end, writes the remaining rows and the
// footer, flushes w, and returns what the footer records. The offsets
// after the last row up to end are a hole. end must be above first and
// above the last row's offset, else Close returns ErrInvalidRange and the
// writer stays open. After Close the Writer returns ErrClosed.
func (w *Writer) Close(end uint64) (Meta, error) {
	if w.err != nil {
		return Meta{}, w.err
	}
	if end <= w.first || end < w.next || end > math.MaxInt64 {
		return Meta{}, fmt.Errorf("%w: end %d, first %d, rows up to %d", ErrInvalidRange, end, w.first, w.next)
	}
	if err := w.flush(); err != nil {
		return Meta{}, err
	}
	if w.next < end {
		w.holes = append(w.holes, Range{First: w.next, End: end})
	}
	meta := Meta{First: w.first, End: end, Holes: w.holes, Rows: w.nrows, Digest: w.digest.sum()}
	for i, v := range footerValues(meta) {
		if err := w.fw.AppendKeyValueMetadata(footerKeys[i], v); err != nil {
			return Meta{}, w.fail(fmt.Errorf("parquetfile: footer: %w", err))
		}
	}
	if err := w.fw.Close(); err != nil {
		return Meta{}, w.fail(fmt.Errorf("parquetfile: close: %w", err))
	}
	if err := w.out.Flush(); err != nil {
		return Meta{}, w.fail(fmt.Errorf("parquetfile: flush: %w", err))
	}
	w.fail(nil)
	return meta, nil
}

// rowBuilder collects rows as Arrow arrays of archiveSchema.
type rowBuilder struct {
	rb                              *array.RecordBuilder
	offset, producerID, producerSeq *array.Int64Builder
	topic                           *array.StringBuilder
	key, messageID, payload         *array.BinaryBuilder
	ingestTime, clientTime          *array.TimestampBuilder
	headers                         *array.ListBuilder
	header                          *array.StructBuilder
	headerKey                       *array.StringBuilder
	headerValue                     *array.BinaryBuilder
	schemaVersion                   *array.Int32Builder
}

func newRowBuilder() *rowBuilder {
	rb := array.NewRecordBuilder(memory.DefaultAllocator, archiveSchema)
	b := &rowBuilder{
		rb:            rb,
		offset:        rb.Field(fieldLogOffset).(*array.Int64Builder),
		topic:         rb.Field(fieldTopic).(*array.StringBuilder),
		key:           rb.Field(fieldKey).(*array.BinaryBuilder),
		producerID:    rb.Field(fieldProducerID).(*array.Int64Builder),
		producerSeq:   rb.Field(fieldProducerSeq).(*array.Int64Builder),
		messageID:     rb.Field(fieldMessageID).(*array.BinaryBuilder),
		ingestTime:    rb.Field(fieldIngestTime).(*array.TimestampBuilder),
		clientTime:    rb.Field(fieldClientTime).(*array.TimestampBuilder),
		payload:       rb.Field(fieldPayload).(*array.BinaryBuilder),
		headers:       rb.Field(fieldHeaders).(*array.ListBuilder),
		schemaVersion: rb.Field(fieldSchemaVersion).(*array.Int32Builder),
	}
	b.header = b.headers.ValueBuilder().(*array.StructBuilder)
	b.headerKey = b.header.FieldBuilder(0).(*array.StringBuilder)
	b.headerValue = b.header.FieldBuilder(1).(*array.BinaryBuilder)
	return b
}

// append adds m's row; see digest.go for which values are null.
func (b *rowBuilder) append(m *orderlogpb.StoredMessage) {
	msg := m.GetMessage()
	b.offset.Append(int64(m.GetOffset()))
	b.topic.Append(msg.GetTopic())
	appendNullable(b.key, msg.GetKey())
	b.producerID.Append(int64(m.GetProducerId()))
	b.producerSeq.Append(int64(m.GetProducerSeq()))
	appendNullable(b.messageID, msg.GetMessageId())
	b.ingestTime.Append(arrow.Timestamp(m.GetIngestTimeUs()))
	if t := msg.GetClientTimeUs(); t != 0 {
		b.clientTime.Append(arrow.Timestamp(t))
	} else {
		b.clientTime.AppendNull()
	}
	b.payload.Append(msg.GetValue())
	b.headers.Append(true)
	for _, h := range msg.GetHeaders() {
		b.header.Append(true)
		b.headerKey.Append(h.GetKey())
		b.headerValue.Append(h.GetValue())
	}
	b.schemaVersion.AppendNull()
}

func appendNullable(b *array.BinaryBuilder, v []byte) {
	if len(v) == 0 {
		b.AppendNull()
		return
	}
	b.Append(v)
}

// newRecord returns the collected rows as a record and empties the builders.
func (b *rowBuilder) newRecord() arrow.RecordBatch { return b.rb.NewRecordBatch() }

func (b *rowBuilder) release() {
	if b.rb != nil {
		b.rb.Release()
		b.rb = nil
	}
}
