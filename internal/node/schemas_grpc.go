package node

import (
	"google.golang.org/grpc"

	"orderlog/proto/orderlogpb"
	"orderlog/schema"
)

// registerSchemas serves the schema registry as the gRPC service Schemas
// on every role, as mountSchemas serves it over HTTP: it needs only etcd.
// The unary interceptor authenticates the call (auth.go; authorizeUnary
// leaves these calls to the service) and schemaAccess authorizes each one
// on its subject, exactly as on the REST path.
func (s *Server) registerSchemas(srv *grpc.Server) {
	orderlogpb.RegisterSchemasServer(srv, schema.NewService(schema.New(s.cli), s.auth.schemaAccess))
}
