// Package httpapi is orderlog's HTTP/JSON front end (DESIGN.md §11). It only
// translates: JSON and headers into the same protobuf requests the gRPC API
// takes, and results back into JSON. All logic lives behind Service, which
// the gRPC front end calls too, so the two APIs cannot disagree.
//
// Errors are answered through internal/apierr: a stable code, a class
// (retry / client / server) and the mapped HTTP status. A request that fails
// to decode is refused whole; nothing of it reaches Service.
package httpapi
