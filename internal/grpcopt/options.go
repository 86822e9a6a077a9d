package grpcopt

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/experimental"
)

// MaxMessageBytes bounds one gRPC message in either direction; request
// limits of their own (message and batch sizes) are checked above it.
const MaxMessageBytes = 64 << 20

// ServerOptions are the options of every orderlog gRPC server.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(MaxMessageBytes), grpc.MaxSendMsgSize(MaxMessageBytes),
		experimental.BufferPool(sharedPool),
	}
}

// DialOptions are the options of every orderlog gRPC client connection
// (plaintext: orderlog runs inside a trusted network).
func DialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMessageBytes), grpc.MaxCallSendMsgSize(MaxMessageBytes)),
		experimental.WithBufferPool(sharedPool),
	}
}
