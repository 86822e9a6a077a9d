// Package parquetfile writes and reads orderlog's archive file: one Parquet
// file holding one contiguous offset range [First, End) of the global log,
// one row per message, rows in offset order. The format is specified in
// docs/format/archive.md; this package is its only writer and reader.
//
// What it owns:
//   - the schema (column names, types, nullability and order), the writer
//     settings (zstd, statistics, page index, bloom filters, dictionary on
//     topic, sorting column log_offset) and the footer key-values
//     orderlog.format_version, orderlog.first, orderlog.end, orderlog.holes,
//     orderlog.rows and orderlog.digest;
//   - the digest's canonical row encoding (digest.go), which independent
//     readers (DuckDB in the tests, see duckcheck/) recompute;
//   - the mapping between a row and the orderlogpb.StoredMessage the hot path
//     serves: Read returns messages proto.Equal to what was appended.
//   - encryption at rest (crypt.go): with WriterOptions.Keys a file is
//     Parquet modular encryption, AES_GCM_V1, footer and every column under
//     the current key, its id in the footer key metadata; Open WithKeys
//     decrypts, and a key it lacks is a *KeyError naming the id, never
//     rows. Which keys, and how they are derived, is the caller's.
//
// Invariants:
//   - rows are in strictly increasing log_offset order, all inside
//     [First, End); every offset of the range without a row is in exactly one
//     hole; Rows + the holes' lengths = End - First;
//   - so the row index of an offset is (offset - First) minus the hole
//     offsets below it, and a reader finds any offset from the footer alone,
//     then seeks with the page index (offset index) instead of decoding from
//     a row group's start.
//
// Usage: the tiering worker (tiering/) calls NewWriter with the first offset
// of a committed range, Append for every message in offset order, and
// Close with the range's end (decided while appending: size, age, day),
// which writes the footer and returns the Meta it recorded; it uploads the
// bytes under ObjectKey. Readers call Open on the object (an io.ReaderAt: the footer,
// page index and bloom filters are read on demand, data pages only for the
// rows asked for), then Read, Query or MayContainKey.
//
// What it must never do: decide which ranges are archived or when (the
// tiering worker does), talk to object storage, etcd or the network, close
// the io.Writer it was given, or serve a message that differs from the hot
// path's bytes: a file whose footer disagrees with its rows is an error
// (ErrCorrupt), never a best-effort read.
package parquetfile
