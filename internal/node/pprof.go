package node

import (
	"net/http"
	"net/http/pprof"
)

// registerPprof serves the Go runtime profiles under /debug/pprof/ (for
// example `go tool pprof http://HOST/debug/pprof/profile?seconds=10`).
func registerPprof(mux *http.ServeMux) {
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
}
