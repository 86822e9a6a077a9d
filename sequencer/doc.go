// Package sequencer gives orderlog its global, real-time total order
// (docs/design.md §5).
//
// It owns: the etcd election of one sequencer leader and its fencing epoch
// (keys.SeqEpoch), the reservation of offset blocks (keys.SeqReserved), grant
// sessions with ingest nodes (the Sequencer/Grant gRPC stream), the commit log
// (Written / Hole / Watermark records written to the leader's own ledger,
// format in docs/format/commit-log.md), the committed watermark C, and the
// commit-map stream readers follow.
//
// The protocol core is Machine, a plain state machine without I/O: inputs are
// grant requests, Written / Unused reports, session events, ticks carrying
// monotonic time, and etcd / ledger results; outputs (Ready) are grant
// replies, commit records to append, close / recover requests, reservation
// requests and the published C. Node is the thin loop around it that talks to
// etcd, gRPC and ledgers.
//
// Ingest side of a grant session (GrantClient does the mechanics): open one
// Grant stream per incarnation with Hello{incarnation, lease id} to the
// leader (LeaderAddress); create ledgers in the epoch of seq/epoch; send
// GrantRequest per sealed batch (replies come in request order, with the
// leader's epoch on every frame); report Written(range, ledger, entry) at
// every LAC advance, also for entries ≤ last of a ledger someone else
// closed; report Unused only for a grant no AddEntry was ever sent for;
// answer CloseLedgerRequest by closing at the LAC and sending LedgerClosed;
// on NOT_LEADER or a broken stream reconnect to the current leader; on
// UNKNOWN_LEDGER / LEDGER_NOT_OPEN / WRONG_WRITER open a new ledger. An
// idle stream sends a heartbeat every 100 ms; a session silent for
// MachineConfig.SessionTimeout (1 s) is ended and its ledgers closed.
//
// Invariants:
//   - An offset is granted at most once across all epochs: a leader grants
//     only inside a reservation it extended by a CAS that compared its epoch,
//     and a new leader starts granting only above the R it read after writing
//     its epoch.
//   - Invariant H is the only way to make a hole: a grant reported Unused (no
//     AddEntry was ever sent for it), or a grant whose ledger is closed and
//     none of whose entries ≤ last contains it. Clocks (leases, session
//     timeouts) only trigger closes; no safety decision reads a clock.
//   - C advances over the contiguous resolved prefix and is published only
//     once the commit-log entry holding Watermark(C) is confirmed.
//   - A new leader grants nothing before every older-epoch ledger is closed
//     and [C₀, R) is resolved and confirmed.
//
// The sequencer must never read message bytes, never make a hole for a
// reason other than invariant H, and never grant outside its epoch's
// reservation.
package sequencer
