// Package pipeline is the ingest write path of DESIGN.md §3 as a plain state
// machine: accepted messages wait, are sealed into batches, each batch gets
// one grant bound to the open ledger, is appended as one ledger entry, and is
// logged (acknowledged and reported Written) when the ledger's LAC passes it.
//
// The pipeline does no I/O. Its owner feeds it inputs (Add, LedgerOpened,
// Granted, GrantRefused, Appended, Confirmed, LedgerFailing, LedgerClosed)
// and acts on the Ready it returns, in field order: send grant requests,
// append granted batches (in order), send Written and Unused reports,
// acknowledge logged messages, and only then open a ledger (whose
// producer-state snapshot must include what was just logged).
//
// Invariants:
//   - Batches are sealed in arrival order and granted in request order, so
//     within a ledger entries hold increasing offsets, and a producer's
//     messages keep their order.
//   - A batch is logged only when the LAC of its ledger covers its entry, or
//     when its ledger closed with a last entry that covers it.
//   - While a ledger is failing nothing new is sealed; when it has closed,
//     every batch not in an entry ≤ last is put back at the front of the
//     queue, in its original order, and only then is a new ledger opened —
//     so re-granted messages get higher offsets than everything logged before
//     them and never overtake messages of their producer.
//   - A grant is reported Unused only if no AddEntry was ever sent for it.
package pipeline
