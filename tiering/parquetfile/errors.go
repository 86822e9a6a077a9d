package parquetfile

import (
	"errors"
	"fmt"
)

var (
	// ErrInvalidRange is returned by NewWriter for a first offset that does
	// not fit log_offset (an int64), and by Close for an end not above
	// first and the last row's offset, or above 2^63-1. After Close's, the
	// writer is still open.
	ErrInvalidRange = errors.New("parquetfile: invalid offset range")
	// ErrOutOfOrder is returned by Append for an offset not above the
	// previous row's. The row is not written; the writer can go on.
	ErrOutOfOrder = errors.New("parquetfile: offset not above the previous row's")
	// ErrOutOfRange is returned by Append for an offset below the file's
	// first or at 2^63-1 and above. The row is not written; the writer can
	// go on.
	ErrOutOfRange = errors.New("parquetfile: offset outside the file's range")
	// ErrInvalidMessage is returned by Append for a message the format cannot
	// hold: no Message, a producer id or sequence number above 2^63-1, a
	// topic or header key that is not UTF-8. The row is not written.
	ErrInvalidMessage = errors.New("parquetfile: message cannot be archived")
	// ErrClosed is returned by Append and Close after Close, or after a write
	// to the underlying io.Writer failed (the file is then unusable).
	ErrClosed = errors.New("parquetfile: writer closed")
	// ErrNotArchive is returned by Open for a Parquet file that carries none
	// of the orderlog.* footer keys: some other program's file.
	ErrNotArchive = errors.New("parquetfile: not an orderlog archive file")
	// ErrUnsupportedVersion is returned by Open for an orderlog.format_version
	// other than "1" and "2".
	ErrUnsupportedVersion = errors.New("parquetfile: unsupported archive format version")
	// ErrCorrupt is returned (wrapped, with what disagrees) by Open when the
	// footer key-values are malformed or disagree with the file (row count,
	// holes, schema, row-group statistics), and by Read and Query when the
	// rows disagree with the footer.
	ErrCorrupt = errors.New("parquetfile: corrupt archive file")
)

// recoverCorrupt turns a panic in arrow-go, which it raises on some damaged
// input (a nil page header, an impossible length), into an error wrapping
// ErrCorrupt in *err. Defer it around arrow-go calls only, never around a
// caller's callback, whose panics must go on.
func recoverCorrupt(err *error) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("%w: arrow-go: %v", ErrCorrupt, r)
	}
}
