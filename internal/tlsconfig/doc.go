// Package tlsconfig owns orderlog's TLS material: it loads a process's
// certificate, key and certificate authority (CA) from PEM files, reloads
// them when asked (SIGHUP) or when the files change, and builds from them
// every tls.Config and gRPC transport credential the process uses — the
// client-facing gRPC and HTTP servers, node-to-node gRPC clients, etcd
// clients. It also creates a local CA and the certificates `orderlog dev
// --tls` needs (generate.go).
//
// Invariants:
//   - A handshake uses one loaded generation of certificate, key and CA
//     pool as a whole; a reload swaps the generation atomically, and a
//     reload that fails (a key that does not match its certificate, a
//     file half written) keeps the previous generation in use.
//   - A server that has a CA verifies any client certificate offered
//     against it and refuses one that does not chain to it; a client
//     verifies the server against the CA (or the system's roots without
//     one). Nothing here ever skips verification.
//
// The package must never open sockets or log: callers serve and report.
package tlsconfig
