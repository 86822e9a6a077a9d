// Package ledger is the ledger client: BookKeeper-style replicated ledgers
// (DESIGN §4) written to WAL stores over the walpb.WAL gRPC contract, with
// metadata in etcd. Ingest batches and the sequencer's commit log are both
// written to ledgers.
//
// # What it owns
//
// The metadata records at keys.Ledger(id) and the id counter
// keys.LedgerIDCounter (format: docs/format/ledger-metadata.md); the writer
// (ensemble writes, ack quorum, LAC, close); recovery of someone else's
// ledger (fence, walk, roll forward, close); reading confirmed entries.
//
// # Usage
//
//	w, err := ledger.Create(ctx, etcd, ledger.CreateOptions{
//		Epoch: e, WriterIncarnation: inc, Ensemble: members, AckQuorum: 2, Tolerate: 1,
//		Stores: dialer, Writer: ledger.WriterOptions{OnConfirm: func(lac int64) { ... }},
//	})
//	id, err := w.Append(payload, ledger.Span{First: 100, End: 140}) // ids dense from 0
//	err = w.WaitConfirmed(ctx, id)     // or react to OnConfirm(lac): entries ≤ lac are confirmed
//	m, err := w.Close(ctx)             // m.LastEntry ≥ every LAC ever reported
//
//	m, err := ledger.Recover(ctx, etcd, id, ledger.RecoverOptions{Stores: dialer})
//	r, err := ledger.OpenReader(ctx, etcd, id, ledger.ReaderOptions{Stores: dialer})
//	err = r.Scan(ctx, 0, r.Last(), func(e ledger.Entry) error { ... })
//	ms, err := ledger.List(ctx, etcd, ledger.Filter{States: []ledger.State{ledger.StateOpen}, EpochBelow: e})
//
// Entry ids are int64, dense from 0; -1 means none. A Span is the global
// offset range [First, End) an entry carries (empty for entries without
// offsets); non-empty spans of one ledger never go backwards, so a closed
// ledger's [FirstOffset, EndOffset) is the hull of its entries' spans.
//
// Close closes at the LAC of the moment it is called: call WaitConfirmed
// first for entries that should be in. When Append or Err reports
// ErrQuorumLost (fewer than A stores can take writes) or ErrFenced (someone
// recovers the ledger), the caller calls Close, acknowledges entries up to
// the returned LastEntry (which may exceed the writer's own LAC after a
// recovery), and moves Unconfirmed(LastEntry) to a new ledger created on a
// new ensemble: entries without offsets (commit records) can be appended
// again as they are; an entry's offsets were granted for this ledger only,
// so ingest re-grants its messages instead. If Close finds a recovery in progress
// it waits for it; if ctx ends first the caller can Recover the ledger
// itself.
//
// A Reader serves an entry only as a store answered it PRESENT (the store
// verified its checksum) and never beyond its bound. Scan streams from one
// member and moves to the next when the store fails, answers anything
// else, or sends nothing for ReaderOptions.Silence (a paused node keeps its
// connections open, so its stream neither answers nor breaks); it goes on
// at the entry it reached, so every entry is delivered once and in order,
// and fails with ErrUnreadable only when no member serves the next entry.
//
// Stores are reached only through a Dialer (GRPCDialer dials the member's
// address); tests wrap it to inject faults. The ensemble of an open or
// recovering ledger never changes: with W = A, or once more than W−A
// members lost their disks, an unconfirmed entry cannot be rolled forward
// to A stores and Recover returns *RecoveryIncompleteError (the ledger
// stays recovering) until the stores come back.
//
// A ledger may be created degraded: CreateOptions.W is the intended
// ensemble size, and with fewer live stores (at least A) the ensemble is
// smaller; Metadata records IntendedW. The ensemble of a closed ledger is
// changed only by re-replication (ensemble.go, driven by
// orderlog/ingest/rereplicate): CopyClosed gives a store a full copy of
// entries ≤ last, then ChangeEnsemble swaps the ensemble in etcd by
// compare-and-swap.
//
// # Invariants
//
//   - Every member re-replication put into a closed ledger's ensemble held
//     entries 0..last when it was put there (CopyClosed verified it). The
//     members a ledger was written on hold each entry ≤ last on at least A
//     of them, not all: one that was down while the tail was written or
//     rolled forward holds a prefix. W == len(Ensemble) ≤ IntendedW, and
//     A ≤ W.
//   - State only moves open → closed or open → recovering → closed, each
//     step a compare-and-swap on the record; the first recovering → closed
//     wins, whoever does it, and every other closer adopts its result.
//   - A ledger is created only if keys.SeqEpoch holds its epoch and the
//     writer's liveness key exists, in the same transaction.
//   - The LAC is the highest entry such that it and every earlier entry have
//     A acks; it never goes back. The writer freezes it before its close CAS
//     and ignores acks after, so every LAC it reported is ≤ the last entry.
//   - Recovery fences W−A+1 stores before deciding anything, rolls forward
//     anything any store holds, ends only at W−A+1 explicit ABSENT answers,
//     and treats UNKNOWN and silence as "cannot conclude".
//   - Replication: A ≥ f+1 and W ≥ 2f+1; W = A = 1 is single-machine only.
//
// The LAC tracker (lac.go) and the recovery decision (decide.go) are plain
// state machines and functions without I/O; writer, recovery and reader
// are thin loops around them.
//
// # What it must never do
//
// Never report an entry confirmed that a later close could leave out; never
// conclude absence from UNKNOWN, a checksum failure or a missing reply;
// never read an entry beyond a closed ledger's last entry or a caller's
// confirmed bound; never decode payloads; never reach a store except
// through a Dialer.
package ledger
