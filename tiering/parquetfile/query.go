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
	for g := range f.groups {
		if may, err := f.mayContain(g, topic, key); may || err != nil {
			return true
		}
	}
	return false
}

// Query calls fn with every message whose topic is topic (empty: any) and
// whose key is key (nil or empty: any), in offset order. It skips the row
// groups MayContainKey's checks rule out; in the others it first reads the
// offset, topic and key columns, then the matching rows (seeking to each run
// of them, or reading the whole row group when there are many runs).
func (f *File) Query(ctx context.Context, topic string, key []byte, fn func(*orderlogpb.StoredMessage) error) error {
	for g := range f.groups {
		may, err := f.mayContain(g, topic, key)
		if err != nil {
			return err
		}
		if !may {
			continue
		}
		if err := f.queryGroup(ctx, g, topic, key, fn); err != nil {
			return err
		}
	}
	return nil
}

// matches reports whether m has topic and key (empty: any).
func matches(m *orderlogpb.StoredMessage, topic string, key []byte) bool {
	return (topic == "" || m.GetMessage().GetTopic() == topic) &&
		(len(key) == 0 || bytes.Equal(m.GetMessage().GetKey(), key))
}

// queryGroup calls fn with the matching messages of row group g.
func (f *File) queryGroup(ctx context.Context, g int, topic string, key []byte, fn func(*orderlogpb.StoredMessage) error) error {
	start, end := f.groupStart[g], f.groupStart[g+1]
	filtered := func(m *orderlogpb.StoredMessage) error {
		if matches(m, topic, key) {
			return fn(m)
		}
		return nil
	}
	if topic == "" && len(key) == 0 {
		return f.readRows(ctx, start, end, allFields, fn)
	}
	var runs [][2]int64 // [first, end) row indices of consecutive matches
	row := start
	err := f.readRows(ctx, start, end, fields(fieldLogOffset, fieldTopic, fieldKey), func(m *orderlogpb.StoredMessage) error {
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
	if err != nil || len(runs) == 0 {
		return err
	}
	if len(runs) > maxSeekRuns {
		return f.readRows(ctx, start, end, allFields, filtered)
	}
	for _, r := range runs {
		if err := f.readRows(ctx, r[0], r[1], allFields, fn); err != nil {
			return err
		}
	}
	return nil
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
