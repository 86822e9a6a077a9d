// Package wal is the WAL store: the durable journal under every ledger
// (docs/design.md §4, §10). One Store keeps the entries of many ledgers
// interleaved in one journal of append-only segment files, so that one
// fdatasync covers every ledger; the byte-by-byte format is
// docs/format/wal.md.
//
// What it owns:
//   - the journal (framing in record.go, segment files in segment.go), the
//     per-ledger entry → position index (index.go, a state machine with no
//     I/O, replayed from record metas) and its per-segment checkpoints
//     (segindex.go), the incarnation cookie (cookie.go);
//   - group commit (commit.go): appends that arrive while a batch is being
//     written and synced form the next batch; an append returns only after
//     the fdatasync that covers it (policy "always"; "interval=<d>" is
//     weaker and documented on Config.SyncInterval);
//   - recovery on Open (open.go, scan.go): checkpoints are trusted for
//     sealed segments, everything else is verified record by record, a torn
//     tail is truncated, damage elsewhere becomes a *CorruptionError and
//     UNKNOWN answers;
//   - the watch on its disk (disk.go): statfs of the directory, sampled
//     every 250 ms and every 16 MiB written, with a high-water mark its node's
//     ingest refuses new messages at and a hard mark from which the store
//     refuses new ledgers and other nodes' appends (*DiskFullError);
//   - the gRPC service (service.go) implementing proto/wal.proto, served
//     with Serve or registered with NewService;
//   - encryption at rest (crypt.go, keycheck.go): with Config.Keys, entry
//     payloads are sealed with AES-256-GCM on append and opened on read,
//     so every client of the store sees plaintext; Open refuses a journal
//     whose keys it lacks (*KeyError);
//   - the directory: an flock on <dir>/LOCK (lock.go) keeps a second Store
//     out, and walfs is the filesystem seam (OS, or the crashable CrashFS
//     the tests use to drop unsynced data and inject errors).
//
// Invariants:
//   - Entry ids of a ledger are dense from 0; the journal holds a ledger's
//     entries in id order. Re-appending an entry with identical span and
//     payload succeeds without writing; anything else that is not the next
//     id fails (*GapError, *ConflictError).
//   - A Present answer means a durable record with a valid checksum. Absent
//     is answered only for ledgers this incarnation wrote, that no damaged
//     bytes may have held entries of; in every other doubt the answer is
//     Unknown.
//   - Fence, CloseLedger and Delete are durable before they return, in every
//     fsync policy.
//   - After a write or fsync error the store refuses appends, fences,
//     closes and deletes (ErrStoreFailed) until reopened: an fsync is never
//     retried as if the data were safe.
//   - Payloads are held in memory only until they are written; reads go
//     back to the segment files (Borrow: in place, from a read-only
//     mapping of a sealed segment that stays mapped while any Lease on it
//     is held, mapped.go).
//
// What it must never do: decode a payload (beyond decrypting it), serve
// bytes of a sealed payload that did not authenticate, answer Absent for an entry it
// once acknowledged, or acknowledge an append before the data is durable
// under the "always" policy.
package wal
