// Package grpcopt holds the gRPC options every orderlog server and client
// shares: a buffer pool sized for orderlog's large frames and the message
// size limits. It owns no protocol logic.
package grpcopt
