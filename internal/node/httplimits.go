package node

import (
	"net/http"
	"time"
)

// HTTPTimeouts bound what a slow or idle HTTP client holds. Responses are
// not bounded (a consumer group's stream and Arrow pages may last long):
// only reading the request is.
type HTTPTimeouts struct {
	// Read bounds reading a request body (headers: 10 s).
	Read time.Duration
	// Idle bounds a kept-alive connection between requests.
	Idle time.Duration
}

// The HTTP timeouts' defaults: a request body of the largest size allowed
// (16 MiB) takes well under Read at a few MB/s.
const (
	DefaultHTTPReadTimeout = 30 * time.Second
	DefaultHTTPIdleTimeout = 2 * time.Minute
)

// bodyDeadline bounds reading a request's body by timeout. It is not the
// server's ReadTimeout: that deadline stays on the connection while the
// response is written, and a long response (a consumer group's stream)
// would be cut when it passes. A request without a body gets no read
// deadline once its headers are in.
func bodyDeadline(next http.Handler, timeout time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
			_ = rc.SetReadDeadline(time.Time{})
		} else {
			_ = rc.SetReadDeadline(time.Now().Add(timeout))
		}
		next.ServeHTTP(w, r)
	})
}
