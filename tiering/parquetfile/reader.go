package parquetfile

import (
	"context"
	"fmt"
	"io"
	"sort"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/metadata"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"orderlog/proto/orderlogpb"
)

// readBufferBytes is the read-ahead of a column chunk's stream (arrow-go's
// default): a page header and small pages come in one ReadAt of this size,
// a larger page in one ReadAt of its size. 64 KiB read 75% more bytes for a
// 10-row read of small rows.
const readBufferBytes = 16 << 10

// readBatchRows is the most rows decoded at once by Read and Query.
const readBatchRows = 1024

// arrowReadProps are the column readers' settings: a batch's binary values
// go into a buffer sized once from the column chunk's size per row, not
// one grown by doubling (a copy and a clear of ~1 MiB per payload batch).
var arrowReadProps = pqarrow.ArrowReadProperties{BatchSize: readBatchRows, PreAllocBinaryData: true}

// RowGroup describes one row group of a file.
type RowGroup struct {
	// First and End bound the offsets of the row group's rows, [First, End),
	// from the log_offset statistics: First is its first row's offset, End
	// its last row's + 1. Holes inside are holes of the file.
	First, End uint64
	// Rows is the number of rows.
	Rows int64
	// Bytes is the compressed size of the row group's column chunks.
	Bytes int64
}

// File is an open archive file. Its methods are safe for concurrent use;
// each reads from the io.ReaderAt only what it needs (see Read and Query).
type File struct {
	// src is what Open read the footer from; a ReaderAtContext reads the
	// rest with the context of the call that needs it (see at).
	src   io.ReaderAt
	size  int64
	props *parquet.ReaderProperties
	pq    *file.Reader
	arrow *pqarrow.FileReader
	bloom *metadata.BloomFilterReader
	meta  Meta
	index rowIndex
	// tail is the file's tail as Open read it; enc, for an encrypted
	// file, its key (nil: in clear).
	tail *fileTail
	enc  *encryption
	// groups[i] is row group i; groupStart[i] is the index of its first row,
	// groupStart[len(groups)] = meta.Rows.
	groups     []RowGroup
	groupStart []int64
}

// ReaderAtContext is an io.ReaderAt whose reads a context can end: a File
// opened over one reads its rows, dictionaries and bloom filters with the
// context of the call that needs them (Read, Query, Select, a Cursor's),
// so that a caller gone stops the fetches it started.
type ReaderAtContext interface {
	io.ReaderAt
	ReadAtContext(ctx context.Context, p []byte, off int64) (int, error)
}

// boundReader reads a ReaderAtContext with one context.
type boundReader struct {
	ctx context.Context
	r   ReaderAtContext
}

func (b boundReader) ReadAt(p []byte, off int64) (int, error) {
	return b.r.ReadAtContext(b.ctx, p, off)
}

// at returns f reading with ctx: a view sharing f's footer and checks,
// with arrow-go readers of its own over the source bound to ctx. Without
// a ReaderAtContext it is f, except for an encrypted file: arrow-go's
// decryptors are not safe for concurrent use (they carry the AAD of the
// module being read), so every call gets readers of its own.
func (f *File) at(ctx context.Context) (*File, error) {
	src, bound := f.src.(ReaderAtContext)
	if !bound && f.enc == nil {
		return f, nil
	}
	r := f.src
	if bound {
		r = boundReader{ctx, src}
	}
	view := *f
	if err := view.newReaders(r); err != nil {
		return nil, err
	}
	return &view, nil
}

// OpenOption configures Open and OpenContext.
type OpenOption func(*openConfig)

type openConfig struct{ keys *Keys }

// WithKeys lets Open read files encrypted under keys (files in clear open
// with or without keys). Without it an encrypted file is a *KeyError.
func WithKeys(keys *Keys) OpenOption { return func(c *openConfig) { c.keys = keys } }

// Open reads the footer of the archive file in r[0:size] and checks it: the
// orderlog.* key-values (ErrNotArchive without any, ErrUnsupportedVersion,
// ErrCorrupt when malformed), the schema, and that the row groups'
// log_offset statistics and row counts agree with the range and holes.
// It reads the file's tail only (two ReadAt calls). An encrypted file
// needs WithKeys and its key, else a *KeyError.
func Open(r io.ReaderAt, size int64, opts ...OpenOption) (_ *File, err error) {
	defer recoverCorrupt(&err)
	var cfg openConfig
	for _, o := range opts {
		o(&cfg)
	}
	props := parquet.NewReaderProperties(memory.DefaultAllocator)
	// Without a buffered stream arrow-go reads a whole column chunk into
	// memory before decoding its first page, whatever row is asked for.
	props.BufferedStreamEnabled = true
	props.BufferSize = readBufferBytes
	f := &File{src: r, size: size, props: props}
	if f.tail, f.enc, err = readTail(r, size, cfg.keys); err != nil {
		return nil, err
	}
	if err := f.newParquetReader(r); err != nil {
		return nil, err
	}
	if f.meta, err = decodeMeta(footerLookup(f.pq.MetaData().KeyValueMetadata())); err != nil {
		return nil, err
	}
	if err := checkSchema(f.pq.MetaData().Schema, f.meta.FormatVersion); err != nil {
		return nil, err
	}
	f.index = newRowIndex(f.meta.First, f.meta.End, f.meta.Holes)
	if err := f.loadRowGroups(); err != nil {
		return nil, err
	}
	return f, f.newArrowReader()
}

// newReaders gives f arrow-go readers over src.
func (f *File) newReaders(src io.ReaderAt) error {
	if err := f.newParquetReader(src); err != nil {
		return err
	}
	return f.newArrowReader()
}

// newParquetReader gives f a Parquet reader over src: with the footer
// f.pq decoded when there is one and the file is in clear; by decoding the
// footer (from f.tail, in memory) otherwise, since arrow-go sets up an
// encrypted file's decryption only when it decodes the footer itself. A
// footer the key does not decrypt is a *KeyError.
func (f *File) newParquetReader(src io.ReaderAt) (err error) {
	opts := []file.ReadOption{file.WithReadProps(f.enc.readerProperties(*f.props))}
	if f.pq != nil && f.enc == nil {
		opts = append(opts, file.WithMetadata(f.pq.MetaData()))
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("arrow-go: %v", r)
		}
		if err != nil && f.enc != nil {
			err = &KeyError{KeyID: f.enc.keyID, Err: err}
		}
	}()
	pq, err := file.NewParquetReader(io.NewSectionReader(tailFirst{src, f.tail}, 0, f.size), opts...)
	if err != nil {
		return fmt.Errorf("parquetfile: open: %w", err)
	}
	f.pq, f.bloom = pq, pq.GetBloomFilterReader()
	return nil
}

// newArrowReader gives f an Arrow reader over its Parquet reader.
func (f *File) newArrowReader() (err error) {
	if f.arrow, err = pqarrow.NewFileReader(f.pq, arrowReadProps, memory.DefaultAllocator); err != nil {
		return fmt.Errorf("parquetfile: open: %w", err)
	}
	return nil
}

// OpenContext is Open reading the footer with ctx; the File's later reads
// go through r with the contexts of the calls that make them.
func OpenContext(ctx context.Context, r ReaderAtContext, size int64, opts ...OpenOption) (*File, error) {
	f, err := Open(boundReader{ctx, r}, size, opts...)
	if err != nil {
		return nil, err
	}
	f.src = r
	if err := f.newReaders(r); err != nil {
		return nil, err
	}
	return f, nil
}

// footerLookup returns a lookup of the footer key-values in which a key
// written twice reads as a value no check accepts.
func footerLookup(kv metadata.KeyValueMetadata) func(string) (string, bool) {
	values := make(map[string]string, kv.Len())
	for i, k := range kv.Keys() {
		if _, dup := values[k]; dup {
			values[k] = "duplicate key"
			continue
		}
		values[k] = kv.Values()[i]
	}
	return func(k string) (string, bool) { v, ok := values[k]; return v, ok }
}

// loadRowGroups reads every row group's log_offset statistics and checks
// that the row groups are consecutive slices of the rows the footer
// describes: the first and last offsets hold rows, and the row count is the
// number of non-hole offsets between them.
func (f *File) loadRowGroups() error {
	md := f.pq.MetaData()
	f.groups = make([]RowGroup, md.NumRowGroups())
	f.groupStart = make([]int64, md.NumRowGroups()+1)
	for i := range f.groups {
		rg := md.RowGroup(i)
		if err := checkChunks(rg, md.GetSourceFileSize()); err != nil {
			return fmt.Errorf("%w: row group %d: %v", ErrCorrupt, i, err)
		}
		g, err := rowGroupOf(rg)
		if err != nil {
			return fmt.Errorf("%w: row group %d: %v", ErrCorrupt, i, err)
		}
		start := f.groupStart[i]
		if g.First < f.meta.First || g.End > f.meta.End || f.index.inHole(g.First) || f.index.inHole(g.End-1) ||
			f.index.rowsBelow(g.First) != start || f.index.rowsBelow(g.End)-start != g.Rows {
			return fmt.Errorf("%w: row group %d holds offsets [%d,%d) in %d rows from row %d, which the range and holes deny",
				ErrCorrupt, i, g.First, g.End, g.Rows, start)
		}
		f.groups[i] = g
		f.groupStart[i+1] = start + g.Rows
	}
	if rows := f.groupStart[len(f.groups)]; rows != f.meta.Rows {
		return fmt.Errorf("%w: %s=%d, the file holds %d rows", ErrCorrupt, keyRows, f.meta.Rows, rows)
	}
	return nil
}

// checkChunks checks that rg's column chunks, page indexes and bloom
// filters lie inside the file. arrow-go trusts these numbers and panics on
// some bad ones in goroutines of its own, where no recover can catch it.
func checkChunks(rg *metadata.RowGroupMetaData, fileSize int64) error {
	inFile := func(off, n int64) bool { return off >= 4 && n >= 0 && off <= fileSize && n <= fileSize-off }
	for leaf := 0; leaf < rg.NumColumns(); leaf++ {
		col, err := rg.ColumnChunk(leaf)
		if err != nil {
			return err
		}
		start := col.DataPageOffset()
		if col.HasDictionaryPage() {
			if d := col.DictionaryPageOffset(); d <= 0 || d >= start {
				return fmt.Errorf("column %d: dictionary page at %d, data at %d", leaf, d, start)
			}
			start = col.DictionaryPageOffset()
		}
		if !inFile(start, col.TotalCompressedSize()) || col.TotalCompressedSize() == 0 || col.NumValues() < 0 {
			return fmt.Errorf("column %d: %d bytes at %d in a file of %d", leaf, col.TotalCompressedSize(), start, fileSize)
		}
		for _, loc := range []*metadata.IndexLocation{col.GetColumnIndexLocation(), col.GetOffsetIndexLocation()} {
			if loc != nil && !inFile(loc.Offset, int64(loc.Length)) {
				return fmt.Errorf("column %d: page index of %d bytes at %d", leaf, loc.Length, loc.Offset)
			}
		}
		if off := col.BloomFilterOffset(); off > 0 && !inFile(off, int64(col.BloomFilterLength())) {
			return fmt.Errorf("column %d: bloom filter of %d bytes at %d", leaf, col.BloomFilterLength(), off)
		}
	}
	return nil
}

// rowGroupOf describes rg from its log_offset statistics.
func rowGroupOf(rg *metadata.RowGroupMetaData) (RowGroup, error) {
	col, err := rg.ColumnChunk(leafLogOffset)
	if err != nil {
		return RowGroup{}, err
	}
	stats, err := col.Statistics()
	if err != nil {
		return RowGroup{}, err
	}
	s, ok := stats.(*metadata.Int64Statistics)
	if !ok || !s.HasMinMax() || s.Min() < 0 || s.Max() < s.Min() || rg.NumRows() < 1 {
		return RowGroup{}, fmt.Errorf("no log_offset statistics or no rows")
	}
	return RowGroup{First: uint64(s.Min()), End: uint64(s.Max()) + 1, Rows: rg.NumRows(), Bytes: rg.TotalCompressedSize()}, nil
}

// Meta returns what the footer records.
func (f *File) Meta() Meta { return f.meta }

// Encrypted reports whether the file is encrypted (else it is in clear).
func (f *File) Encrypted() bool { return f.enc != nil }

// RowGroups describes the row groups, in offset order.
func (f *File) RowGroups() []RowGroup { return append([]RowGroup(nil), f.groups...) }

// Read calls fn with every message at offsets in [from, to) (clipped to the
// file's range), in offset order, as the StoredMessage the hot path serves
// (proto.Equal to what was appended). fn owns each message. It reads only
// the row groups holding [from, to), and in them only the pages holding it:
// the row index comes from the offset and the holes, and each column seeks
// to it with the offset index. An error from fn stops Read and is returned.
func (f *File) Read(ctx context.Context, from, to uint64, fn func(*orderlogpb.StoredMessage) error) error {
	from, to = f.index.clip(from, to)
	if from >= to {
		return nil
	}
	v, err := f.at(ctx)
	if err != nil {
		return err
	}
	return v.readRows(ctx, f.index.rowsBelow(from), f.index.rowsBelow(to), v.allFields(), fn)
}

// ReadVersioned is Read that also hands fn each row's schema_version (0:
// null; always 0 in a format version 1 file), which is no field of a
// StoredMessage: the tiering worker resolves it from the schema registry.
func (f *File) ReadVersioned(ctx context.Context, from, to uint64, fn func(m *orderlogpb.StoredMessage, schemaVersion int32) error) error {
	from, to = f.index.clip(from, to)
	if from >= to {
		return nil
	}
	v, err := f.at(ctx)
	if err != nil {
		return err
	}
	want := v.allFields() | fields(fieldSchemaVersion)
	return v.readVersioned(ctx, f.index.rowsBelow(from), f.index.rowsBelow(to), want, func(batch []*orderlogpb.StoredMessage, versions []int32) error {
		for i, m := range batch {
			if err := fn(m, versions[i]); err != nil {
				return err
			}
		}
		return nil
	})
}

// Verify reads every row and checks the rows against the footer: their
// offsets (as Read does) and the digest. It returns an error wrapping
// ErrCorrupt when they disagree. The tiering worker can run it on what it
// uploaded; it reads the whole file.
func (f *File) Verify(ctx context.Context) error { return f.VerifyEach(ctx, nil) }

// VerifyEach is Verify that also hands each row to each (when not nil), so
// a caller checks its own properties of the rows in the same pass.
func (f *File) VerifyEach(ctx context.Context, each func(*orderlogpb.StoredMessage)) error {
	d := newRowDigest()
	err := f.ReadVersioned(ctx, f.meta.First, f.meta.End, func(m *orderlogpb.StoredMessage, schemaVersion int32) error {
		if schemaVersion != 0 && m.GetMessage().GetSchemaId() == 0 {
			return fmt.Errorf("%w: offset %d has schema_version %d and no schema_id", ErrCorrupt, m.GetOffset(), schemaVersion)
		}
		d.add(m, schemaVersion)
		if each != nil {
			each(m)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if got := d.sum(); got != f.meta.Digest {
		return fmt.Errorf("%w: the rows' digest is %s, the footer's %s", ErrCorrupt, got, f.meta.Digest)
	}
	return nil
}

// readRows decodes rows [start, end) (row indices of the file) into messages
// with the fields of want filled, checks their offsets against the footer,
// and calls fn with each.
func (f *File) readRows(ctx context.Context, start, end int64, want fieldSet, fn func(*orderlogpb.StoredMessage) error) error {
	return f.readBatches(ctx, start, end, want, func(batch []*orderlogpb.StoredMessage) error {
		for _, m := range batch {
			if err := fn(m); err != nil {
				return err
			}
		}
		return nil
	})
}

// readBatches is readRows a batch of checked messages at a time.
func (f *File) readBatches(ctx context.Context, start, end int64, want fieldSet, fn func([]*orderlogpb.StoredMessage) error) error {
	return f.readVersioned(ctx, start, end, want, func(batch []*orderlogpb.StoredMessage, _ []int32) error { return fn(batch) })
}

// readVersioned is readBatches that also hands fn the batch's
// schema_version values (nil unless want has fieldSchemaVersion).
func (f *File) readVersioned(ctx context.Context, start, end int64, want fieldSet, fn func([]*orderlogpb.StoredMessage, []int32) error) error {
	if start >= end {
		return nil
	}
	cols, check, err := f.openRows(ctx, start, end, want)
	if err != nil {
		return err
	}
	defer cols.release()
	for remaining := end - start; remaining > 0; {
		if err := ctx.Err(); err != nil {
			return err
		}
		batch, err := cols.next(min(remaining, readBatchRows))
		if err != nil {
			return err
		}
		for _, m := range batch {
			if err := check.row(m.GetOffset()); err != nil {
				return err
			}
		}
		if err := fn(batch, cols.versions); err != nil {
			return err
		}
		remaining -= int64(len(batch))
	}
	return nil
}

// openRows opens readers of the fields in want over rows [start, end)
// (start < end), positioned at start, and the check of their offsets.
func (f *File) openRows(ctx context.Context, start, end int64, want fieldSet) (*columnSet, offsetCheck, error) {
	first := f.groupOf(start)
	last := f.groupOf(end - 1)
	groups := make([]int, 0, last-first+1)
	for g := first; g <= last; g++ {
		groups = append(groups, g)
	}
	cols, err := f.openColumns(ctx, want, groups, start-f.groupStart[first])
	if err != nil {
		return nil, offsetCheck{}, err
	}
	return cols, offsetCheck{index: f.index, next: f.offsetOfRow(start), end: f.offsetOfRow(end-1) + 1}, nil
}

// groupOf returns the row group holding row r (0 <= r < Rows).
func (f *File) groupOf(r int64) int {
	return sort.Search(len(f.groups), func(g int) bool { return f.groupStart[g+1] > r })
}

// offsetOfRow returns the offset of row r (0 <= r < Rows).
func (f *File) offsetOfRow(r int64) uint64 { return f.index.offsetOfRow(r) }

// offsetCheck checks that rows come with exactly the non-hole offsets of
// [next, end), in order: what the footer says the file holds there.
type offsetCheck struct {
	index     rowIndex
	next, end uint64
}

func (c *offsetCheck) row(o uint64) error {
	// Between the expected offset and o there may be one hole, ending at o.
	if o < c.next || o >= c.end || c.index.inHole(o) || c.index.skipHole(c.next) != o {
		return fmt.Errorf("%w: row with offset %d where the footer expects the first non-hole offset from %d",
			ErrCorrupt, o, c.next)
	}
	c.next = o + 1
	return nil
}
