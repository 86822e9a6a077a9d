// Package coordinator is the ingest node's coordination logic (DESIGN.md
// §3, §6) as a plain state machine: producer sessions and their takeover,
// the producer table and its snapshots, rebuilt state, Idempotency-Key
// buckets, the ledger lifecycle (open, close on a refused grant or a
// failure, close-and-regrant) and the write pipeline's batches.
//
// The Machine does no I/O and reads no clock. Its owner feeds it inputs —
// a frame arrived (Produce), a producer registered (InitProducer), a grant
// answered (Granted, GrantRefused), a ledger opened, confirmed, failed or
// closed, a takeover or an etcd write finished — and acts on the Ready it
// returns, in field order (Ready's comments say why the order matters):
// send grant requests, append entries, report Written / Unused / closed
// ledgers, answer and release frames, then start the slow operations (open
// or close a ledger, take a producer over, record a producer's state
// ledger, register an idempotency bucket) whose outcomes come back as
// inputs. A seeded simulation (sim_test.go) and transcripts
// (testdata/*.txt) drive it without etcd, stores or a sequencer.
//
// Invariants:
//   - A message is acknowledged only when its entry is confirmed (≤ the
//     ledger's LAC or its closed last entry), or, for LocallyDurable, when
//     the writer's own store fsynced it (ack mode leader).
//   - A producer's frames are judged against its sequence state only once
//     the session is ready: its state was rebuilt, a snapshot of it was
//     confirmed in one of this node's ledgers, and that ledger was recorded
//     as the producer's state ledger in etcd — so the next owner rebuilds a
//     state that includes everything this node logs for it.
//   - Entries of a ledger are numbered in the order they appear in
//     Ready.Appends; entry 0 is the producer-table snapshot the owner wrote
//     when it created the ledger.
//
// It must never acknowledge a message it cannot find again in a ledger
// entry ≤ the ledger's LAC or closed last entry, and never accept a frame
// of a producer whose session is not ready.
package coordinator
