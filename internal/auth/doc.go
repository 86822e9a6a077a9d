// Package auth holds orderlog's credentials and permissions as plain data
// and functions: bearer tokens (parsed, hashed, compared in constant time),
// per-topic access control lists and their evaluation. The etcd store and
// the gRPC/HTTP checks that use them live at the edges (store.go,
// internal/node). Audit writes the audit trail's lines to the logger it is
// given; nothing here logs or returns a secret.
package auth
