// Package console is orderlog's web console: the HTML, CSS and JavaScript
// of a small single-page application, embedded in the binary, and the
// handler that serves them under /ui/ (docs/console.md).
//
// The console owns no data and no API of its own. Every page reads the
// node's HTTP API from the browser (GET /v1/status, /v1/messages,
// /v1/topics, /v1/consumers/{group}, /metrics, /readyz, and the read-only
// /v1/console/ routes that internal/node adds: session, topics, groups,
// producers, archive), with the bearer token the user pasted, so the same
// authentication and ACLs decide what it shows.
//
// It must never: serve anything but its own static files (no message ever
// passes through this package), load anything from outside the node (no
// CDN; the Content-Security-Policy says 'self' only), or write to the log
// (the only write it offers, topic creation, is the API's own POST
// /v1/topics, which needs the admin ACL).
package console
