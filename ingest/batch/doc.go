// Package batch encodes and decodes the payload of one ledger entry: a
// versioned header (offset range, producer runs, ingest time) followed by
// the records of one ingest batch. The byte layout is docs/format/batch.md.
//
// Invariants: a batch of Count records covers offsets [FirstOffset,
// FirstOffset+Count); record i has offset FirstOffset+i; the producer runs
// cover the records contiguously and in order (anonymous messages form runs
// with ProducerID 0), so their counts sum to Count.
//
// A batch is encoded once, at ingest, and never re-encoded: readers decode
// records straight out of the stored bytes (decoded slices alias the input).
// The WAL store never calls this package.
package batch
