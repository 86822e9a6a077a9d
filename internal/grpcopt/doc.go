// Package grpcopt holds the gRPC options every orderlog server and client
// shares: a buffer pool sized for orderlog's large frames, the message size
// limits, and the protobuf codec that marshals into that pool (with
// hand-written encoders for the produce stream, see proto/producewire). It
// owns no protocol logic.
//
// Everything is selected per server and per connection, through
// ServerOptions and DialOptions; the package must never change gRPC's
// process-wide state (its codec registry, its default buffer pool), which
// every other gRPC user in a program importing orderlog's client shares.
package grpcopt
