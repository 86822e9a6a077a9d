package parquetfile

import (
	"bufio"
	"fmt"
	"io"
	"math"

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
//
// Append collects rows in Arrow builders; every BatchRows rows the batch
// goes to a goroutine that encodes it into the row group (zstd, statistics,
// bloom filters, the io.Writer) while Append collects the next one. Batches
// are encoded one at a time and in order, so the file's bytes are the same
// as if each were encoded in Append.
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
	// encoding receives the result of the batch being encoded, nil when
	// none is. Only that batch's goroutine uses fw and out until it is
	// received.
	encoding chan error
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

// Append adds m as the row at offset m.Offset, its schema_version null.
// It returns ErrOutOfRange, ErrOutOfOrder or ErrInvalidMessage (and
// writes nothing) for a row that does not fit, ErrClosed after Close or a
// failed write.
func (w *Writer) Append(m *orderlogpb.StoredMessage) error { return w.AppendVersioned(m, 0) }

// AppendVersioned is Append with the row's schema_version: the version of
// m's schema id within the schema subject named like m's topic, 0 for
// null (no schema id, or not a version of that subject). The tiering
// worker resolves it; it must be 0 when m has no schema id, and is never
// negative (else ErrInvalidMessage).
func (w *Writer) AppendVersioned(m *orderlogpb.StoredMessage, schemaVersion int32) error {
	if w.err != nil {
		return w.err
	}
	if err := w.check(m); err != nil {
		return err
	}
	if schemaVersion < 0 || (schemaVersion != 0 && m.GetMessage().GetSchemaId() == 0) {
		return fmt.Errorf("%w: offset %d: schema version %d for schema id %d", ErrInvalidMessage, m.GetOffset(), schemaVersion, m.GetMessage().GetSchemaId())
	}
	if o := m.GetOffset(); o > w.next {
		w.holes = append(w.holes, Range{First: w.next, End: o})
	}
	w.rows.append(m, schemaVersion)
	w.digest.add(m, schemaVersion)
	w.nrows++
	w.next = m.GetOffset() + 1
	if w.pending++; w.pending >= w.opts.BatchRows {
		return w.flush()
	}
	return nil
}

// check returns why m cannot be the next row, or nil: its offset's place
// in the file, then what checkRow checks of any row.
func (w *Writer) check(m *orderlogpb.StoredMessage) error {
	if m == nil || m.GetMessage() == nil {
		return fmt.Errorf("%w: no message", ErrInvalidMessage)
	}
	switch o := m.GetOffset(); {
	case o < w.first || o >= math.MaxInt64:
		return fmt.Errorf("%w: offset %d, range from %d", ErrOutOfRange, o, w.first)
	case o < w.next:
		return fmt.Errorf("%w: offset %d after %d", ErrOutOfOrder, o, w.next-1)
	}
	return checkRow(m)
}

// flush hands the rows in the builders to a goroutine that encodes them
// into the current row group (the Parquet writer starts a new one every
// RowGroupRows), once the batch before them is encoded. It returns that
// batch's error.
func (w *Writer) flush() error {
	if w.pending == 0 {
		return nil
	}
	rec := w.rows.newRecord()
	w.pending = 0
	w.rows.reserveLike(rec)
	if err := w.wait(); err != nil {
		rec.Release()
		return err
	}
	done := make(chan error, 1)
	w.encoding = done
	go func() {
		defer rec.Release()
		done <- w.fw.WriteBuffered(rec)
	}()
	return nil
}

// Wait returns once the rows handed to the encoding goroutine are encoded
// into the file, or with the error that stopped it. Rows still collecting
// in the builders (fewer than BatchRows) stay there: Wait changes nothing
// in the file. A benchmark calls it to charge the encoding to the Writer.
func (w *Writer) Wait() error {
	if w.err != nil {
		return w.err
	}
	return w.wait()
}

// wait waits until the batch being encoded, if any, is in the row group.
func (w *Writer) wait() error {
	if w.encoding == nil {
		return nil
	}
	err := <-w.encoding
	w.encoding = nil
	if err != nil {
		return w.fail(fmt.Errorf("parquetfile: write rows: %w", err))
	}
	return nil
}

// fail makes the writer unusable after err (nil: after a good Close). No
// batch is being encoded.
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
	if err := w.wait(); err != nil {
		return Meta{}, err
	}
	if w.next < end {
		w.holes = append(w.holes, Range{First: w.next, End: end})
	}
	meta := Meta{FormatVersion: 2, First: w.first, End: end, Holes: w.holes, Rows: w.nrows, Digest: w.digest.sum()}
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
	schemaID                        *array.Int64Builder
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
		schemaID:      rb.Field(fieldSchemaID).(*array.Int64Builder),
	}
	b.header = b.headers.ValueBuilder().(*array.StructBuilder)
	b.headerKey = b.header.FieldBuilder(0).(*array.StringBuilder)
	b.headerValue = b.header.FieldBuilder(1).(*array.BinaryBuilder)
	return b
}

// append adds m's row with its schema_version (0: null); see digest.go
// for which values are null.
func (b *rowBuilder) append(m *orderlogpb.StoredMessage, schemaVersion int32) {
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
	if schemaVersion != 0 {
		b.schemaVersion.Append(schemaVersion)
	} else {
		b.schemaVersion.AppendNull()
	}
	if id := msg.GetSchemaId(); id != 0 {
		b.schemaID.Append(int64(id))
	} else {
		b.schemaID.AppendNull()
	}
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

// reserveLike makes room in the emptied builders for a batch like rec, so
// that the next batch's buffers are allocated once instead of grown (and
// copied) from empty as it fills.
func (b *rowBuilder) reserveLike(rec arrow.RecordBatch) {
	n := int(rec.NumRows())
	b.rb.Reserve(n)
	for _, c := range []struct {
		builder *array.BinaryBuilder
		field   int
	}{{b.key, fieldKey}, {b.messageID, fieldMessageID}, {b.payload, fieldPayload}} {
		b.reserveData(c.builder, rec.Column(c.field))
	}
	b.reserveData(b.topic.BinaryBuilder, rec.Column(fieldTopic))
	header := rec.Column(fieldHeaders).(*array.List).ListValues().(*array.Struct)
	b.header.Reserve(header.Len())
	b.headerKey.Reserve(header.Len())
	b.headerValue.Reserve(header.Len())
	b.reserveData(b.headerKey.BinaryBuilder, header.Field(0))
	b.reserveData(b.headerValue, header.Field(1))
}

// reserveData reserves as many value bytes in bb as a (a binary or string
// column) holds.
func (b *rowBuilder) reserveData(bb *array.BinaryBuilder, a arrow.Array) {
	type valueBytes interface{ ValueBytes() []byte }
	if v, ok := a.(valueBytes); ok {
		bb.ReserveData(len(v.ValueBytes()))
	}
}

func (b *rowBuilder) release() {
	if b.rb != nil {
		b.rb.Release()
		b.rb = nil
	}
}
