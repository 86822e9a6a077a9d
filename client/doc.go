// Package client is orderlog's Go client: an idempotent, pipelining producer
// and range/tail readers over the public gRPC API (proto/orderlog.proto).
//
// A Producer assigns sequence numbers itself and keeps every frame until it
// is acknowledged. When the stream breaks it reconnects and sends the
// unacknowledged frames again, in order, with their original sequence
// numbers; the server answers those it already logged with their original
// offsets, so a message is logged once however often it is sent.
//
// Errors are *apierr.Error values with stable codes.
package client
