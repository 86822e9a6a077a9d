// Package consumer serves consumer groups (docs/consumers.md): members
// join a group for a set of topics over a Consume stream; the group's
// virtual partitions are assigned to its live members; each member reads
// its partitions' messages in global offset order and commits how far it
// got.
//
// Everything a group is lives in etcd under orderlog/groups/<group>/:
//
//   - members/<id>: one key per member, under a lease its node keeps alive
//     while the member's stream is open (revoked when the stream ends, so a
//     member that dies leaves at once; expired after the session timeout
//     when its node dies);
//   - state: the generation and the assignment of partitions to members,
//     rewritten with generation+1 whenever the members change (any node
//     serving a member of the group reconciles, by compare-and-swap);
//   - offsets/<topic>/<partition>: the committed offset, written only in a
//     transaction that compares the state key, so a commit from an older
//     generation (a member replaced in a rebalance: a zombie) changes
//     nothing.
//
// The assignment (assign.go) and the commit check (checkCommit) are plain
// functions; the etcd I/O is in store.go and coordinator.go, the stream in
// session.go and service.go.
package consumer
