package parquetfile

import (
	"fmt"
	"math"
	"math/bits"

	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
)

// Defaults of WriterOptions.
const (
	DefaultRowGroupRows  = 64 * 1024
	DefaultDataPageBytes = 64 << 10
	DefaultZstdLevel     = 1
	DefaultBloomFPP      = 0.01
	DefaultBatchRows     = 4096
)

// WriterOptions are the tunable settings of a Writer; everything else
// (schema, codec, statistics, page index, dictionary, sorting column, bloom
// filter columns) is the format and fixed. The zero value means defaults.
type WriterOptions struct {
	// RowGroupRows is the number of rows in a row group (the last one may
	// hold fewer). A reader reads whole row groups only in Query; Read seeks
	// inside one with the page index. Default 65536.
	RowGroupRows int64
	// DataPageBytes is the size, before compression, at which a column's
	// data page is cut: it bounds what a page-index seek reads. arrow-go
	// checks it after every 1024 values (its write batch), so a page holds
	// whole batches of 1024 values and can exceed it by one batch: with
	// 1 KiB payloads a payload page is ~1 MiB whatever the setting. Default
	// 64 KiB: with arrow-go's default (1 MiB) a 64k-row group of small rows
	// has one page per column, and reading 10 rows reads the whole row
	// group (docs/format/archive.md, "Writer settings").
	DataPageBytes int64
	// ZstdLevel is the zstd level (arrow-go maps it onto the encoder's
	// fastest/default/better/best speeds). Default 1.
	ZstdLevel int
	// BloomFPP is the false-positive probability of the bloom filters on key
	// and message_id. Each row group has its own, sized for the distinct
	// values it holds, at most RowGroupRows (128 KiB for 64k at 0.01).
	// Default 0.01.
	BloomFPP float64
	// BatchRows is how many rows are collected in Arrow builders before they
	// are encoded into the current row group, on another goroutine while
	// the next batch is collected. Default 4096.
	BatchRows int
	// Keys, when they hold a key, encrypt the file under the current one
	// (Parquet modular encryption, footer and every column; crypt.go).
	// Nil or empty: the file is in clear.
	Keys *Keys
}

// Validate fills in defaults for zero fields and rejects nonsense.
func (o *WriterOptions) Validate() error {
	if o.RowGroupRows == 0 {
		o.RowGroupRows = DefaultRowGroupRows
	}
	if o.DataPageBytes == 0 {
		o.DataPageBytes = DefaultDataPageBytes
	}
	if o.ZstdLevel == 0 {
		o.ZstdLevel = DefaultZstdLevel
	}
	if o.BloomFPP == 0 {
		o.BloomFPP = DefaultBloomFPP
	}
	if o.BatchRows == 0 {
		o.BatchRows = DefaultBatchRows
	}
	switch {
	case o.RowGroupRows < 1:
		return fmt.Errorf("parquetfile: RowGroupRows %d < 1", o.RowGroupRows)
	case o.DataPageBytes < 1024:
		return fmt.Errorf("parquetfile: DataPageBytes %d < 1024", o.DataPageBytes)
	case o.ZstdLevel < 1 || o.ZstdLevel > 22:
		return fmt.Errorf("parquetfile: ZstdLevel %d outside 1..22", o.ZstdLevel)
	case !(o.BloomFPP > 0 && o.BloomFPP < 1):
		return fmt.Errorf("parquetfile: BloomFPP %v outside (0, 1)", o.BloomFPP)
	case o.BatchRows < 1:
		return fmt.Errorf("parquetfile: BatchRows %d < 1", o.BatchRows)
	}
	return nil
}

// writerProperties are the Parquet settings of an archive file
// (docs/format/archive.md, "Writer settings"). o must be validated.
//
// Bloom filters: arrow-go sizes a filter at its 1 MiB maximum unless told
// the number of distinct values (NDV) up front, and the writer does not
// know how many rows a row group will get (the file ends when Close says).
// A fixed NDV of RowGroupRows gives every file at least 2 x 128 KiB of
// filters (an 11-row file: 272 KB instead of 26 KB). So the filters are
// arrow-go's adaptive ones: candidates from the RowGroupRows size down to
// 2 KiB, halving; each row group keeps the smallest that holds its
// distinct values at BloomFPP.
func writerProperties(o WriterOptions) *parquet.WriterProperties {
	maxBloom := bloomBytes(o.RowGroupRows, o.BloomFPP)
	candidates := max(1, bits.Len64(uint64(maxBloom/minBloomBytes)))
	props := []parquet.WriterProperty{
		parquet.WithCompression(compress.Codecs.Zstd),
		parquet.WithCompressionLevel(o.ZstdLevel),
		parquet.WithStats(true),
		parquet.WithPageIndexEnabled(true),
		parquet.WithSortingColumns([]parquet.SortingColumn{{ColumnIdx: leafLogOffset}}),
		parquet.WithDictionaryDefault(false),
		parquet.WithDictionaryFor(pathTopic, true),
		parquet.WithMaxBloomFilterBytes(maxBloom),
		parquet.WithBloomFilterEnabledFor(pathKey, true),
		parquet.WithAdaptiveBloomFilterEnabledFor(pathKey, true),
		parquet.WithBloomFilterCandidatesFor(pathKey, candidates),
		parquet.WithBloomFilterFPPFor(pathKey, o.BloomFPP),
		parquet.WithBloomFilterEnabledFor(pathMessageID, true),
		parquet.WithAdaptiveBloomFilterEnabledFor(pathMessageID, true),
		parquet.WithBloomFilterCandidatesFor(pathMessageID, candidates),
		parquet.WithBloomFilterFPPFor(pathMessageID, o.BloomFPP),
		parquet.WithMaxRowGroupLength(o.RowGroupRows),
		parquet.WithDataPageSize(o.DataPageBytes),
	}
	if enc := encryptionProperties(o.Keys); enc != nil {
		props = append(props, parquet.WithEncryptionProperties(enc))
	}
	return parquet.NewWriterProperties(props...)
}

// minBloomBytes is the smallest adaptive candidate worth having: arrow-go
// cannot give a smaller one a useful expected NDV (it steps by 500).
const minBloomBytes = 2048

// bloomBytes is the size of a split-block bloom filter for ndv distinct
// values at false-positive probability fpp, as arrow-go computes it (the
// Parquet spec's formula, rounded up to a power of two, 32 B to 128 MiB).
func bloomBytes(ndv int64, fpp float64) int64 {
	bitsNeeded := -8 * float64(ndv) / math.Log(1-math.Pow(fpp, 1.0/8))
	n := int64(32)
	for float64(n*8) < bitsNeeded && n < 128<<20 {
		n *= 2
	}
	return n
}
