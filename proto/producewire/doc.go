// Package producewire encodes and decodes the messages of the Produce
// stream (ProduceRequest, ProduceResponse) by hand, for the rates the write
// path carries: at 240k msg/s the generic protobuf code was a sixth of the
// load generator's CPU and its per-ack allocations most of its garbage. It
// also encodes the read streams' pages (ReadResponse), which carry the same
// Message: through the protobuf runtime a page was a fifth of a node's CPU
// for a range read.
//
// Invariants, each checked by a fuzz test against the protobuf runtime:
//   - The encoders produce exactly the bytes proto.Marshal produces
//     (fields in number order, zero values omitted, unknown fields kept at
//     the end of their message) and refuse what it refuses (strings that
//     are not UTF-8).
//   - The decoders accept what proto.Unmarshal accepts and refuse what it
//     refuses, with the same fields set; unknown fields are dropped.
//
// DecodeProduceRequest aliases its input (see there); nothing else keeps a
// reference to a buffer it was given.
package producewire
