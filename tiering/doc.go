// Package tiering archives the committed log as Parquet files on an object
// store and serves reads of the archive (docs/design.md §8, formats in
// docs/format/archive.md).
//
// One elected Worker reads the log from the archived watermark T into a
// local file, cuts it (a later UTC day, a size, an age at C), records its
// plan in etcd, puts the object under its final key with If-None-Match,
// puts the file's manifest segment the same way, and moves T and the head
// in one transaction. A successor finishes a recorded plan under the same
// keys. An ArchiveReader follows the head and serves reads below the log
// start through a block cache on the local disk. With archive keys
// (ArchiveKeys: HKDF of the node's encryption key file) the worker writes
// encrypted files and the reader decrypts them; a file under a key id the
// reader lacks answers INTERNAL naming the id. With a SchemaResolver the
// worker fills each row's schema_version and writes the versions the rows
// name under _schemas/ before the file (fileschemas.go: resolved against
// the versions registered before the file's plan, so a repeated plan
// writes the same rows).
//
// Invariants: T never decreases; every offset in [head.First, T) is in
// exactly one published file, as a row or a hole; an object is never
// overwritten (a conflicting one halts the worker); nothing temporary is
// written under the archive's prefix; a row's schema_version names a
// _schemas/ object already in place.
//
// It must never publish a file whose rows differ from the log's, nor move
// T past what a manifest segment covers.
package tiering
