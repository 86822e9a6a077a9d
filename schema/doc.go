// Package schema owns orderlog's schema registry: subjects (by convention
// one per topic, named like the topic), immutable versions 1..n of each,
// global schema ids, and the compatibility level each subject is held to.
//
// Invariants:
//   - A version, once written, never changes and keeps its number; a
//     subject's versions are 1..latest without gaps.
//   - A schema id names one format+text forever. The same format and text
//     (up to JSON whitespace) registered again, under any subject, gets
//     the id it already has, as Confluent Schema Registry does.
//   - Ids and versions are allocated in one etcd transaction that compares
//     what the registration read, so two registrars never hand out the
//     same id or version.
//
// Compatibility is decided by plain functions (Check, compat_avro.go,
// compat_json.go, compat_protobuf.go) on parsed schemas; the Registry does the etcd I/O around
// them. Handler serves the Confluent Schema Registry's core REST API.
//
// The package must never validate messages on the produce path or touch
// the log: it only keeps schemas. docs/schemas.md says what is built.
package schema
