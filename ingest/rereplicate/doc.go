// Package rereplicate is the auto-recovery worker (DESIGN §4): it brings
// closed ledgers — ingest ledgers and the sequencer's commit ledgers — back
// to the number of copies they were meant to have after a store lost its
// disk, a node was replaced, or a ledger was created degraded.
//
// # What it owns
//
// Nothing in etcd but its election (keys.RereplicationElection): one
// worker runs in the cluster, elected with concurrency.Election among the
// processes that run a WAL store. It changes ledger metadata only through
// ledger.ChangeEnsemble and stores only through ledger.CopyClosed.
//
// # How a pass works
//
//  1. Read the store registrations (ledger.LiveStores) and every closed
//     ledger (ledger.List).
//  2. For each ledger decide which members still count as copies (plan):
//     a member counts if its store is registered with the incarnation the
//     ledger names, or if its registration has been gone for less than
//     Grace (a restart). A store registered with another incarnation came
//     back empty and never counts for the copy it no longer holds; a store
//     gone for Grace or longer counts as lost. A registered member is
//     asked once (LastEntry) whether it holds every entry ≤ last: a
//     closed ledger's entries are each on A members, not W, and a member
//     that was down while the tail was written or rolled forward holds a
//     prefix only. Until it answers PRESENT up to last it counts as no
//     copy (partial); a member that cannot be asked now still counts.
//  3. If fewer than IntendedW members count, copy every entry ≤ last onto
//     registered stores that are not counted members — partial members
//     first (the copy resumes after their prefix), then the least loaded
//     (fewest closed ledgers), which may be the new incarnation of a lost
//     member — reading from the counted members that are registered.
//  4. Compare-and-swap the ensemble: counted members and filled-up partial
//     ones in their places, then the new copies. A lost CAS (another
//     worker won) deletes the orphan copy.
//
// # Invariants
//
//   - Only closed ledgers are changed. An open ledger's writer owns its
//     ensemble: it closes the ledger when it loses its ack quorum and opens
//     a new one on live stores.
//   - A member is put into an ensemble only after CopyClosed saw it hold
//     every entry ≤ last, fsynced, and counts as a copy only once it said
//     so (or a copy onto it succeeded).
//   - A store in a new incarnation is never counted as a copy of a ledger
//     that names its old incarnation.
//
// # What it must never do
//
// Never change an open or recovering ledger; never count a copy it has not
// seen registered with the ledger's incarnation (apart from Grace); never
// shrink an ensemble without adding a full copy; never decode a payload.
package rereplicate
