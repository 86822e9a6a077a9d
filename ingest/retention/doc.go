// Package retention bounds the log: it moves the log start forward by age
// and by bytes (DESIGN.md §8, "retention") and deletes the ledgers every
// offset of which lies below it.
//
// It owns the log start (keys.LogStart, an offset that only grows: reads
// below it answer OFFSET_OUT_OF_RANGE) and the deletion of ingest ledgers.
// One worker in the cluster does it, elected in etcd
// (keys.RetentionElection).
//
// A pass: Plan (pure: ledger metadata, pins and policy in, the new start
// and the ledgers to delete out), then the log start's compare-and-swap,
// then each ledger's deletion in three steps:
//  1. mark it (keys.LedgerDeleting, created by a compare-and-swap against
//     the closed record's mod revision): re-replication copies it no more;
//  2. DeleteLedger on every member of its ensemble;
//  3. remove its record and the mark in one transaction, once every member
//     answered.
//
// A crash between steps leaves the mark, and the next pass (of this worker
// or its successor) goes on from step 2; a store that was down is asked
// again at every pass until it answers. Nothing is ever served twice or
// lost: the offsets are below the log start before step 1.
//
// Invariants:
//   - the log start never passes the committed watermark C, and never
//     moves back;
//   - a ledger is deleted only when closed and every offset it holds is
//     below the log start, and no producer record's rebuild needs it
//     (Pins);
//   - the sequencer's commit and checkpoint ledgers (which hold no offsets)
//     are never deleted here.
//
// It must never delete an open ledger, and never touch a ledger's entries
// otherwise than through DeleteLedger.
package retention
