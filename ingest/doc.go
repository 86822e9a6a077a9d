// Package ingest is the ingest node (DESIGN.md §3, §6): producer sessions,
// the producer registry in etcd, the write pipeline (package
// ingest/pipeline) driven against a ledger writer and the sequencer's grant
// session, and the gRPC and HTTP front ends.
//
// Subpackages: wal (the WAL store), ledger (the ledger client), batch (the
// entry payload format), producer (per-producer sequence state), pipeline
// (the write path state machine), httpapi (HTTP/JSON translation).
//
// Invariants: a message is acknowledged only once its entry is confirmed
// (ack mode quorum) — never from a grant alone; exactly one owner appends
// for a producer, recorded in etcd by compare-and-swap; a producer's frames
// are checked against its sequence state before anything of them is logged.
//
// It must never acknowledge a message it cannot find again in a ledger
// entry ≤ the ledger's LAC or closed last entry.
package ingest
