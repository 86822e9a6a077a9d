package parquetfile

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"

	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/metadata"

	"orderlog/proto/orderlogpb"
)

// maxSeekRuns is the most runs of matching rows Query reads with a seek
// each; with more it reads the whole row group once.
const maxSeekRuns = 8

// MayContainKey reports whether any row may have topic (empty: any topic)
// and key (nil or empty: any key). It reads no data pages: only row-group
// statistics (in the footer), the topic column's dictionary page and the
// key column's bloom filter. False is certain; true means "maybe", and is
// also the answer when a dictionary or bloom filter cannot be read.
func (f *File) MayContainKey(topic string, key []byte) bool {
	v := f
	if f.enc != nil { // readers of its own: see at
		var err error
		if v, err = f.at(context.Background()); err != nil {
			return true
		}
	}
	for g := range f.groups {
		if may, err := v.mayContain(g, topic, key); may || err != nil {
			return true
		}
	}
	return false
}

// Query calls fn with every message whose topic is topic (empty: any) and
// whose key is key (nil or empty: any), in offset order: Select over the
// whole file.
func (f *File) Query(ctx context.Context, topic string, key []byte, fn func(*orderlogpb.StoredMessage) error) error {
	return f.Select(ctx, f.meta.First, f.meta.End, topic, key, func(s Selected) error {
		if s.Message == nil {
			return nil
		}
		return fn(s.Message)
	})
}

// Selected is one step of Select: a matching message, or a range of
// offsets without one.
type Selected struct {
	Message *orderlogpb.StoredMessage
	// Skipped, without a Message, is a range of offsets holding no match
	// (it may hold holes of the file).
	Skipped Range
	// Examined: the skipped rows' topic and key were read to tell;
	// otherwise statistics, dictionaries, bloom filters or the page index
	// ruled them out unread.
	Examined bool
}

// Select calls fn, in offset order, with every message at offsets [from,
// to) (clipped to the file's range) whose topic is topic (empty: any) and
// whose key is key (nil or empty: any), and with the ranges between them
// as skipped. It reads no data page of a row group that MayContainKey's
// checks rule out (statistics, the key's bloom filter, the topic's
// dictionary), nor of the pages whose page-index statistics of key or
// topic rule them out; elsewhere it reads the offset, topic and key
// columns, then the matching rows (seeking to each run of them, or reading
// the stretch once when there are many runs). An error from fn stops
// Select and is returned.
func (f *File) Select(ctx context.Context, from, to uint64, topic string, key []byte, fn func(Selected) error) error {
	from, to = f.index.clip(from, to)
	if from >= to {
		return nil
	}
	v, err := f.at(ctx)
	if err != nil {
		return err
	}
	start, end := f.index.rowsBelow(from), f.index.rowsBelow(to)
	out := &selection{f: f, fn: fn, skipStart: -1}
	for g := f.groupOf(start); g < len(f.groups) && f.groupStart[g] < end; g++ {
		rows := [2]int64{max(start, f.groupStart[g]), min(end, f.groupStart[g+1])}
		may, err := v.mayContain(g, topic, key)
		switch {
		case err != nil:
			return err
		case !may:
			err = out.skip(rows[0], rows[1], false)
		case topic == "" && len(key) == 0:
			err = v.readRows(ctx, rows[0], rows[1], v.allFields(), out.message)
		default:
			err = v.selectGroup(ctx, g, rows, topic, key, out)
		}
		if err != nil {
			return err
		}
	}
	return out.flush()
}

// selection hands Select's messages and skipped ranges to its fn, joining
// consecutive skipped rows of the same kind into one range.
type selection struct {
	f  *File
	fn func(Selected) error
	// [skipStart, skipEnd) are skipped rows not handed yet (-1: none),
	// examined or not.
	skipStart, skipEnd int64
	examined           bool
}

// skip notes rows [start, end) as holding no match.
func (s *selection) skip(start, end int64, examined bool) error {
	if start >= end {
		return nil
	}
	if s.skipStart >= 0 && s.examined != examined {
		if err := s.flush(); err != nil {
			return err
		}
	}
	if s.skipStart < 0 {
		s.skipStart, s.examined = start, examined
	}
	s.skipEnd = end
	return nil
}

// flush hands the skipped rows noted so far as their offset range.
func (s *selection) flush() error {
	if s.skipStart < 0 {
		return nil
	}
	r := Range{First: s.f.offsetOfRow(s.skipStart), End: s.f.offsetOfRow(s.skipEnd-1) + 1}
	s.skipStart = -1
	return s.fn(Selected{Skipped: r, Examined: s.examined})
}

func (s *selection) message(m *orderlogpb.StoredMessage) error {
	if err := s.flush(); err != nil {
		return err
	}
	return s.fn(Selected{Message: m})
}

// matches reports whether m has topic and key (empty: any).
func matches(m *orderlogpb.StoredMessage, topic string, key []byte) bool {
	return (topic == "" || m.GetMessage().GetTopic() == topic) &&
		(len(key) == 0 || bytes.Equal(m.GetMessage().GetKey(), key))
}

// selectGroup hands the matches among rows [rows[0], rows[1]) of row group
// g, which may hold some, and skips the rest.
func (f *File) selectGroup(ctx context.Context, g int, rows [2]int64, topic string, key []byte, out *selection) error {
	candidates := f.pageCandidates(g, rows, topic, key)
	var runs [][2]int64 // [first, end) row indices of consecutive matches
	for _, c := range candidates {
		row := c[0]
		err := f.readRows(ctx, c[0], c[1], fields(fieldLogOffset, fieldTopic, fieldKey), func(m *orderlogpb.StoredMessage) error {
			if matches(m, topic, key) {
				if n := len(runs); n > 0 && runs[n-1][1] == row {
					runs[n-1][1]++
				} else {
					runs = append(runs, [2]int64{row, row + 1})
				}
			}
			row++
			return nil
		})
		if err != nil {
			return err
		}
	}
	if len(runs) > maxSeekRuns {
		// One read of the stretch, the rows between the runs skipped.
		runs = [][2]int64{{runs[0][0], runs[len(runs)-1][1]}}
	}
	skip := func(start, end int64) error { return skipRows(out, candidates, start, end) }
	next := rows[0]
	for _, r := range runs {
		if err := skip(next, r[0]); err != nil {
			return err
		}
		row := r[0]
		err := f.readRows(ctx, r[0], r[1], f.allFields(), func(m *orderlogpb.StoredMessage) error {
			row++
			if matches(m, topic, key) {
				return out.message(m)
			}
			return out.skip(row-1, row, true)
		})
		if err != nil {
			return err
		}
		next = r[1]
	}
	return skip(next, rows[1])
}

// skipRows skips rows [start, end): as examined where they lie in the
// candidate ranges (whose topic and key were read), else as ruled out.
func skipRows(out *selection, candidates [][2]int64, start, end int64) error {
	for _, c := range candidates {
		if c[1] <= start || c[0] >= end {
			continue
		}
		if err := out.skip(start, max(start, c[0]), false); err != nil {
			return err
		}
		if err := out.skip(max(start, c[0]), min(end, c[1]), true); err != nil {
			return err
		}
		start = min(end, c[1])
	}
	return out.skip(start, end, false)
}

// pageCandidates returns the parts of rows (row indices of the file, in
// row group g) that the page index does not rule out: the rows of the
// pages of the key and topic columns whose min and max may hold key and
// topic, as sorted disjoint [first, end) ranges. Without a page index it
// returns rows whole.
func (f *File) pageCandidates(g int, rows [2]int64, topic string, key []byte) [][2]int64 {
	out := [][2]int64{rows}
	base := f.groupStart[g]
	if len(key) > 0 {
		out = intersectRows(out, f.pagesMayContain(g, leafKey, key), base)
	}
	if topic != "" {
		out = intersectRows(out, f.pagesMayContain(g, leafTopic, []byte(topic)), base)
	}
	return out
}

// pagesMayContain returns the rows of row group g (relative to its first)
// of the pages of byte-array column leaf whose page-index min and max may
// hold v, as sorted disjoint [first, end) ranges; nil when the page index
// cannot tell (absent, unreadable or inconsistent): every row may.
func (f *File) pagesMayContain(g, leaf int, v []byte) (out [][2]int64) {
	defer func() {
		if recover() != nil {
			out = nil
		}
	}()
	rgIndex, err := f.pq.GetPageIndexReader().RowGroup(g)
	if err != nil || rgIndex == nil {
		return nil
	}
	colIndex, err := rgIndex.GetColumnIndex(leaf)
	if err != nil || colIndex == nil {
		return nil
	}
	offsets, err := rgIndex.GetOffsetIndex(leaf)
	if err != nil || offsets == nil {
		return nil
	}
	pages := offsets.GetPageLocations()
	mins, maxs, nulls := colIndex.GetMinValues(), colIndex.GetMaxValues(), colIndex.GetNullPages()
	if len(mins) != len(pages) || len(maxs) != len(pages) || len(nulls) != len(pages) {
		return nil
	}
	rows := f.groups[g].Rows
	out = [][2]int64{}
	for i, p := range pages {
		end := rows
		if i+1 < len(pages) {
			end = pages[i+1].FirstRowIndex
		}
		if p.FirstRowIndex < 0 || end > rows || p.FirstRowIndex >= end {
			return nil
		}
		if nulls[i] || bytes.Compare(v, mins[i]) < 0 || bytes.Compare(v, maxs[i]) > 0 {
			continue
		}
		if n := len(out); n > 0 && out[n-1][1] == p.FirstRowIndex {
			out[n-1][1] = end
		} else {
			out = append(out, [2]int64{p.FirstRowIndex, end})
		}
	}
	return out
}

// intersectRows returns the rows of a (row indices of the file) that lie
// in b (relative to base); b nil means every row.
func intersectRows(a, b [][2]int64, base int64) [][2]int64 {
	if b == nil {
		return a
	}
	var out [][2]int64
	for _, x := range a {
		for _, y := range b {
			first, end := max(x[0], y[0]+base), min(x[1], y[1]+base)
			if first < end {
				out = append(out, [2]int64{first, end})
			}
		}
	}
	return out
}

// mayContain reports whether row group g may hold a row with topic and key
// (empty: any), from its statistics, then key's bloom filter, then topic's
// dictionary.
func (f *File) mayContain(g int, topic string, key []byte) (_ bool, err error) {
	defer recoverCorrupt(&err)
	rg := f.pq.MetaData().RowGroup(g)
	if topic != "" && !statsMayContain(rg, leafTopic, []byte(topic)) {
		return false, nil
	}
	if len(key) > 0 {
		if !statsMayContain(rg, leafKey, key) {
			return false, nil
		}
		if may, err := f.bloomMayContain(g, leafKey, key); !may || err != nil {
			return may, err
		}
	}
	if topic != "" {
		return f.dictionaryMayContain(g, leafTopic, topic)
	}
	return true, nil
}

// statsMayContain reports whether v lies within the min/max statistics of
// byte-array column leaf in rg; true without statistics.
func statsMayContain(rg *metadata.RowGroupMetaData, leaf int, v []byte) bool {
	col, err := rg.ColumnChunk(leaf)
	if err != nil {
		return true
	}
	stats, err := col.Statistics()
	if err != nil || stats == nil {
		return true
	}
	s, ok := stats.(*metadata.ByteArrayStatistics)
	if !ok {
		return true
	}
	if s.HasNullCount() && s.NullCount() == rg.NumRows() {
		return false // every value is null
	}
	if !s.HasMinMax() {
		return true
	}
	return bytes.Compare(v, s.Min()) >= 0 && bytes.Compare(v, s.Max()) <= 0
}

// bloomMayContain checks v against column leaf's bloom filter in row group
// g; true when there is none.
func (f *File) bloomMayContain(g, leaf int, v []byte) (bool, error) {
	rgBloom, err := f.bloom.RowGroup(g)
	if err != nil {
		return true, fmt.Errorf("parquetfile: bloom filter: %w", err)
	}
	may := true
	err = rgBloom.VisitColumnBloomFilter(leaf, func(bf metadata.BloomFilter) error {
		typed := metadata.TypedBloomFilter[parquet.ByteArray]{BloomFilter: bf}
		may = typed.Check(parquet.ByteArray(v))
		return nil
	})
	if err != nil {
		return true, fmt.Errorf("parquetfile: bloom filter: %w", err)
	}
	return may, nil
}

// dictionaryMayContain checks v against column leaf's dictionary page in row
// group g, reading only that page. It is true when some data page of the
// column chunk is not dictionary-encoded (the dictionary is then not the
// set of values) or there is no dictionary.
func (f *File) dictionaryMayContain(g, leaf int, v string) (bool, error) {
	col, err := f.pq.MetaData().RowGroup(g).ColumnChunk(leaf)
	if err != nil || !col.HasDictionaryPage() || !allPagesDictionaryEncoded(col) {
		return true, nil
	}
	pages, err := f.pq.RowGroup(g).GetColumnPageReader(leaf)
	if err != nil {
		return true, fmt.Errorf("parquetfile: dictionary of %s: %w", col.PathInSchema(), err)
	}
	defer pages.Close()
	dict, err := pages.GetDictionaryPage()
	if err != nil {
		return true, fmt.Errorf("parquetfile: dictionary of %s: %w", col.PathInSchema(), err)
	}
	if dict == nil {
		return true, nil
	}
	defer dict.Release()
	values, err := plainByteArrays(dict.Data(), int(dict.NumValues()))
	if err != nil {
		return true, err
	}
	for _, d := range values {
		if string(d) == v {
			return true, nil
		}
	}
	return false, nil
}

// allPagesDictionaryEncoded reports whether the chunk's encoding statistics
// show every data page dictionary-encoded (no fallback to plain).
func allPagesDictionaryEncoded(col *metadata.ColumnChunkMetaData) bool {
	stats := col.EncodingStats()
	if len(stats) == 0 {
		return false
	}
	for _, s := range stats {
		dataPage := s.PageType.String() == "DATA_PAGE" || s.PageType.String() == "DATA_PAGE_V2"
		if dataPage && s.Encoding != parquet.Encodings.RLEDict && s.Encoding != parquet.Encodings.PlainDict {
			return false
		}
	}
	return true
}

// plainByteArrays decodes n PLAIN-encoded byte arrays (each a u32
// little-endian length and the bytes), the form of a dictionary page of a
// BYTE_ARRAY column. The slices alias data.
func plainByteArrays(data []byte, n int) ([][]byte, error) {
	if n < 0 || n > len(data)/4 {
		return nil, fmt.Errorf("%w: dictionary of %d values in %d bytes", ErrCorrupt, n, len(data))
	}
	out := make([][]byte, 0, n)
	for i := 0; i < n; i++ {
		if len(data) < 4 {
			return nil, fmt.Errorf("%w: dictionary value %d truncated", ErrCorrupt, i)
		}
		l := binary.LittleEndian.Uint32(data)
		if uint64(l) > uint64(len(data)-4) {
			return nil, fmt.Errorf("%w: dictionary value %d of %d bytes, %d left", ErrCorrupt, i, l, len(data)-4)
		}
		out = append(out, data[4:4+l])
		data = data[4+l:]
	}
	return out, nil
}
