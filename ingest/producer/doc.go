// Package producer is the sequence-number state machine an ingest node keeps
// for every producer it owns (DESIGN.md §3 step 2 and §6). It does no I/O:
// the ingest pipeline feeds it frames, durability outcomes and snapshots, and
// acts on its verdicts.
//
// Invariants, per producer:
//   - durableNext ≤ acceptedNext: seqs below durableNext are durable, seqs in
//     [durableNext, acceptedNext) are accepted and in flight, in order.
//   - A seq is accepted at most once per outcome: a seq below acceptedNext is
//     never accepted again unless its in-flight attempt failed (Failed rolls
//     acceptedNext back, and everything after it fails with it, so producer
//     order is kept).
//   - The dedup window holds the offsets of the last WindowSize durable seqs.
//
// It must never decide durability itself: only Durable and Failed, reported by
// the pipeline from ledger outcomes, move a seq out of flight.
package producer
