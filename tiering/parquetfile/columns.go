package parquetfile

import (
	"context"
	"fmt"
	"math"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"orderlog/proto/orderlogpb"
)

// fieldSet is a set of field indices (fieldLogOffset...), as bits.
type fieldSet uint16

func fields(fs ...int) fieldSet {
	var s fieldSet
	for _, f := range fs {
		s |= 1 << f
	}
	return s
}

// messageFieldsV1 are the fields a StoredMessage has in a format version
// 1 file: every column but schema_version, which is not a message's (the
// worker derives it). Version 2 adds schema_id (messageFields).
var (
	messageFieldsV1 = fields(fieldLogOffset, fieldTopic, fieldKey, fieldProducerID, fieldProducerSeq,
		fieldMessageID, fieldIngestTime, fieldClientTime, fieldPayload, fieldHeaders)
	messageFields = messageFieldsV1 | fields(fieldSchemaID)
)

// allFields are the fields of f's rows that make a StoredMessage.
func (f *File) allFields() fieldSet {
	if f.meta.FormatVersion == 1 {
		return messageFieldsV1
	}
	return messageFields
}

// leaves returns the leaf column indices of the fields in s.
func (s fieldSet) leaves() []int {
	var out []int
	for f := 0; f < numFields; f++ {
		if s&(1<<f) == 0 {
			continue
		}
		switch {
		case f < fieldHeaders:
			out = append(out, f) // one leaf each, same index
		case f == fieldHeaders:
			out = append(out, leafHeaderKey, leafHeaderValue)
		case f == fieldSchemaVersion:
			out = append(out, leafSchemaVersion)
		default:
			out = append(out, leafSchemaID)
		}
	}
	return out
}

// columnSet reads some fields of consecutive rows, as messages: one reader
// per leaf column.
type columnSet struct {
	readers []*pqarrow.ColumnReader
	leaf    []int // leaf[i] is the leaf column readers[i] reads
	// versions are the schema_version values (0: null) of the rows the
	// last next decoded, when schema_version is one of the fields read.
	versions []int32
}

// openColumns opens readers of the fields in want over the row groups
// groups, positioned at row skip of the first of them. The seek goes through
// the offset index: it reads the page holding the row, not those before it.
func (f *File) openColumns(ctx context.Context, want fieldSet, groups []int, skip int64) (_ *columnSet, err error) {
	cs := &columnSet{}
	defer func() {
		if err != nil {
			cs.release()
		}
	}()
	defer recoverCorrupt(&err)
	for _, leaf := range want.leaves() {
		field := leafField(leaf)
		r, err := f.arrow.GetFieldReader(ctx, field, map[int]bool{leaf: true}, groups)
		if err != nil {
			return nil, fmt.Errorf("parquetfile: open column %d: %w", leaf, err)
		}
		cs.readers = append(cs.readers, r)
		cs.leaf = append(cs.leaf, leaf)
		switch {
		case field == fieldHeaders:
			err = f.seekRepeated(r, leaf, groups[0], skip)
		case skip > 0 && f.enc != nil && f.hasDictionary(groups[0], leaf):
			err = dropRows(r, leaf, skip)
		case skip > 0:
			err = r.SeekToRow(skip)
		}
		if err != nil {
			return nil, fmt.Errorf("parquetfile: seek column %d to row %d: %w", leaf, skip, err)
		}
	}
	return cs, nil
}

// leafField returns the field (top-level column) of a leaf column.
func leafField(leaf int) int {
	switch {
	case leaf < leafHeaderKey:
		return leaf
	case leaf <= leafHeaderValue:
		return fieldHeaders
	case leaf == leafSchemaVersion:
		return fieldSchemaVersion
	default:
		return fieldSchemaID
	}
}

// seekRepeated positions r, a reader of a leaf of the repeated headers
// column, at row skip of row group g. arrow-go's SeekToRow (v18.8.0 and
// v18.9.0) corrupts a repeated column when the row is not the first of its
// page: its skipRows decodes all of the page's repetition levels but
// consumes only the skipped rows' definition levels, so the next read fails
// with "number of decoded rep/def levels did not match" or returns shifted
// lists. So seek to the first row of the page holding skip (from the offset
// index), where arrow-go skips nothing, and read and drop the rows up to skip.
func (f *File) seekRepeated(r *pqarrow.ColumnReader, leaf, g int, skip int64) error {
	pageStart := int64(0)
	rgIndex, err := f.pq.GetPageIndexReader().RowGroup(g)
	if err != nil {
		return err
	}
	if rgIndex != nil {
		offsets, err := rgIndex.GetOffsetIndex(leaf)
		if err != nil {
			return err
		}
		if offsets != nil {
			for _, p := range offsets.GetPageLocations() {
				if p.FirstRowIndex <= skip {
					pageStart = p.FirstRowIndex
				}
			}
		}
	}
	if pageStart > 0 {
		if err := r.SeekToRow(pageStart); err != nil {
			return err
		}
	}
	return dropRows(r, leaf, skip-pageStart)
}

// dropRows reads and drops the next n rows of r, a reader of leaf.
func dropRows(r *pqarrow.ColumnReader, leaf int, n int64) error {
	for drop := n; drop > 0; {
		chunked, err := r.NextBatch(min(drop, readBatchRows))
		if err != nil {
			return err
		}
		got := int64(chunked.Len())
		chunked.Release()
		if got == 0 {
			return fmt.Errorf("%w: column %d ends %d rows short", ErrCorrupt, leaf, drop)
		}
		drop -= got
	}
	return nil
}

// hasDictionary reports whether leaf's chunk in row group g starts with a
// dictionary page. In an encrypted file arrow-go (v18.8.0) cannot seek
// such a chunk past its first page: until it has read the dictionary page
// it decrypts the next page header as a dictionary page's (the AAD's
// module type), which fails. So that column is read from the row group's
// start and the rows before the one asked for dropped: it is topic, whose
// pages hold dictionary indices, cheap to decode.
func (f *File) hasDictionary(g, leaf int) bool {
	col, err := f.pq.MetaData().RowGroup(g).ColumnChunk(leaf)
	return err != nil || col.HasDictionaryPage()
}

// release frees the readers. A reader that panicked may panic again here:
// that is swallowed, its error was already reported.
func (cs *columnSet) release() {
	for _, r := range cs.readers {
		func() {
			defer func() { _ = recover() }()
			r.Release()
		}()
	}
	cs.readers = nil
}

// next decodes the next n rows.
func (cs *columnSet) next(n int64) (_ []*orderlogpb.StoredMessage, err error) {
	defer recoverCorrupt(&err)
	msgs := make([]*orderlogpb.StoredMessage, n)
	for i := range msgs {
		msgs[i] = &orderlogpb.StoredMessage{Message: &orderlogpb.Message{}}
	}
	cs.versions = nil
	for i, r := range cs.readers {
		chunked, err := r.NextBatch(n)
		if err != nil {
			return nil, fmt.Errorf("parquetfile: read column %d: %w", cs.leaf[i], err)
		}
		if cs.leaf[i] == leafSchemaVersion {
			cs.versions = make([]int32, n)
			err = decodeVersions(chunked, cs.versions)
		} else {
			err = decodeColumn(cs.leaf[i], chunked, msgs)
		}
		chunked.Release()
		if err != nil {
			return nil, err
		}
	}
	return msgs, nil
}

// decodeColumn sets the field of msgs that leaf column leaf holds from the
// column's values. The headers' key leaf comes before the value leaf.
func decodeColumn(leaf int, col *arrow.Chunked, msgs []*orderlogpb.StoredMessage) error {
	if col.Len() != len(msgs) {
		return fmt.Errorf("%w: column %d: %d values for %d rows", ErrCorrupt, leaf, col.Len(), len(msgs))
	}
	row := 0
	for _, chunk := range col.Chunks() {
		if err := decodeChunk(leaf, chunk, msgs[row:row+chunk.Len()]); err != nil {
			return err
		}
		row += chunk.Len()
	}
	return nil
}

// decodeChunk sets a field of msgs (one per value of a) from leaf column
// leaf's values a. Below the headers, a leaf's index is its field's.
func decodeChunk(leaf int, a arrow.Array, msgs []*orderlogpb.StoredMessage) error {
	var err error
	switch leaf {
	case fieldLogOffset:
		err = eachInt64(a, func(i int, v uint64) { msgs[i].Offset = v })
	case fieldProducerID:
		err = eachInt64(a, func(i int, v uint64) { msgs[i].ProducerId = v })
	case fieldProducerSeq:
		err = eachInt64(a, func(i int, v uint64) { msgs[i].ProducerSeq = v })
	case fieldTopic:
		intern := stringInterner{}
		s := a.(*array.String)
		for i, m := range msgs {
			m.Message.Topic = intern.clone(s.Value(i))
		}
	case fieldKey:
		b := newBinaryCopy(a.(*array.Binary))
		for i, m := range msgs {
			m.Message.Key = b.value(i)
		}
	case fieldMessageID:
		b := newBinaryCopy(a.(*array.Binary))
		for i, m := range msgs {
			m.Message.MessageId = b.value(i)
		}
	case fieldPayload:
		b := newBinaryCopy(a.(*array.Binary))
		for i, m := range msgs {
			m.Message.Value = b.value(i)
		}
	case fieldIngestTime:
		t := a.(*array.Timestamp)
		for i, m := range msgs {
			m.IngestTimeUs = int64(t.Value(i))
		}
	case fieldClientTime:
		t := a.(*array.Timestamp)
		for i, m := range msgs {
			if t.IsValid(i) {
				m.Message.ClientTimeUs = int64(t.Value(i))
			}
		}
	case leafHeaderKey:
		decodeHeaderKeys(a.(*array.List), msgs)
	case leafHeaderValue:
		err = decodeHeaderValues(a.(*array.List), msgs)
	case leafSchemaID:
		err = decodeSchemaIDs(a.(*array.Int64), msgs)
	}
	return err
}

// decodeSchemaIDs sets the messages' schema ids from the schema_id
// column: null is 0, and a value is a uint32 above 0.
func decodeSchemaIDs(a *array.Int64, msgs []*orderlogpb.StoredMessage) error {
	for i, m := range msgs {
		if a.IsNull(i) {
			continue
		}
		v := a.Value(i)
		if v <= 0 || v > math.MaxUint32 {
			return fmt.Errorf("%w: offset %d: schema_id %d", ErrCorrupt, m.Offset, v)
		}
		m.Message.SchemaId = uint32(v)
	}
	return nil
}

// decodeVersions sets versions from the schema_version column: null is 0,
// and a value is above 0.
func decodeVersions(col *arrow.Chunked, versions []int32) error {
	if col.Len() != len(versions) {
		return fmt.Errorf("%w: schema_version: %d values for %d rows", ErrCorrupt, col.Len(), len(versions))
	}
	row := 0
	for _, chunk := range col.Chunks() {
		a := chunk.(*array.Int32)
		for i := range a.Len() {
			if a.IsValid(i) {
				if versions[row] = a.Value(i); versions[row] <= 0 {
					return fmt.Errorf("%w: schema_version %d", ErrCorrupt, versions[row])
				}
			}
			row++
		}
	}
	return nil
}

// eachInt64 calls set with every value of the int64 column a, which must
// not be negative (offsets, producer ids and sequence numbers are below 2^63).
func eachInt64(a arrow.Array, set func(i int, v uint64)) error {
	vals := a.(*array.Int64).Int64Values()
	for i, v := range vals {
		if v < 0 {
			return fmt.Errorf("%w: negative value %d", ErrCorrupt, v)
		}
		set(i, uint64(v))
	}
	return nil
}

// decodeHeaderKeys sets the headers of msgs, with keys only, from the
// headers column read with its key leaf only.
func decodeHeaderKeys(l *array.List, msgs []*orderlogpb.StoredMessage) {
	keys := l.ListValues().(*array.Struct).Field(0).(*array.String)
	intern := stringInterner{}
	for i, m := range msgs {
		start, end := l.ValueOffsets(i)
		if start == end {
			continue
		}
		hs := make([]*orderlogpb.Header, 0, end-start)
		for j := int(start); j < int(end); j++ {
			hs = append(hs, &orderlogpb.Header{Key: intern.clone(keys.Value(j))})
		}
		m.Message.Headers = hs
	}
}

// decodeHeaderValues sets the values of the headers decodeHeaderKeys made,
// from the headers column read with its value leaf only.
func decodeHeaderValues(l *array.List, msgs []*orderlogpb.StoredMessage) error {
	values := newBinaryCopy(l.ListValues().(*array.Struct).Field(0).(*array.Binary))
	for i, m := range msgs {
		start, end := l.ValueOffsets(i)
		hs := m.Message.Headers
		if int64(len(hs)) != end-start {
			return fmt.Errorf("%w: offset %d: %d header keys, %d values", ErrCorrupt, m.Offset, len(hs), end-start)
		}
		for j, h := range hs {
			h.Value = values.value(int(start) + j)
		}
	}
	return nil
}

// binaryCopy holds a copy of a binary column's bytes: value(i) is a slice
// of one shared copy, capped so appending to it cannot overwrite the next.
type binaryCopy struct {
	a     *array.Binary
	bytes []byte
	base  int32
}

func newBinaryCopy(a *array.Binary) binaryCopy {
	offsets := a.ValueOffsets()
	return binaryCopy{a: a, bytes: append([]byte(nil), a.ValueBytes()...), base: offsets[0]}
}

// value returns value i, or nil when it is null or empty.
func (b binaryCopy) value(i int) []byte {
	if b.a.IsNull(i) {
		return nil
	}
	offsets := b.a.ValueOffsets()
	start, end := offsets[i]-b.base, offsets[i+1]-b.base
	if start == end {
		return nil
	}
	return b.bytes[start:end:end]
}

// stringInterner copies strings out of Arrow buffers once per distinct value.
type stringInterner map[string]string

func (in stringInterner) clone(s string) string {
	if c, ok := in[s]; ok {
		return c
	}
	c := string([]byte(s))
	in[c] = c
	return c
}
