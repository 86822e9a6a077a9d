// Package reader serves reads of the committed log (DESIGN.md §7): Read,
// Tail and Query, from the commit map the sequencer publishes.
//
// It owns the reader's commit map (which range lies in which ledger entry,
// which ranges are holes, and the committed watermark C) and the read path
// that turns map segments into messages by reading ledger entries from any
// ensemble store and decoding batches.
//
// Invariants: an offset is served only if it is below C and the map names
// it — as a hole (reported as a skipped range) or as part of a ledger
// entry; the map keeps the highest (epoch, C) it has seen and ignores
// streams of older epochs; a segment below C never changes.
//
// It must never serve raw store contents the commit map does not name.
package reader
