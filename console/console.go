package console

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
	"time"
)

//go:embed assets
var assets embed.FS

// Prefix is where the console is served; its pages' links assume it.
const Prefix = "/ui/"

// pages are the console's routes: each answers index.html, and the script
// renders the page its path names, so that a permalink such as
// /ui/messages?offset=42 works when opened directly.
var pages = map[string]bool{"": true, "messages": true, "tail": true, "topics": true, "consumers": true,
	"producers": true, "archive": true}

// securityHeaders keep the console to its own files: scripts and styles
// from this origin only (none inline), no framing, no referrer leaks.
var securityHeaders = map[string]string{
	"Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
		"connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
	"X-Content-Type-Options": "nosniff",
	"Referrer-Policy":        "no-referrer",
	"X-Frame-Options":        "DENY",
}

// file is one embedded asset with its validator.
type file struct {
	body        []byte
	contentType string
	etag        string
}

// Handler serves the console: GET /ui/ and the pages under it answer
// index.html, /ui/static/NAME an embedded asset, anything else 404.
// Mount it at Prefix on the node's HTTP mux.
func Handler() http.Handler {
	files := loadFiles()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, ok := route(r.URL.Path)
		f, found := files[name]
		if !ok || !found {
			http.NotFound(w, r)
			return
		}
		for k, v := range securityHeaders {
			w.Header().Set(k, v)
		}
		w.Header().Set("Content-Type", f.contentType)
		w.Header().Set("Cache-Control", "no-cache") // revalidate: a new binary brings new assets
		w.Header().Set("ETag", f.etag)
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(f.body))
	})
}

// route maps a request path to an asset name: a page to index.html,
// /ui/static/x to x. ok is false outside the console.
func route(urlPath string) (name string, ok bool) {
	rest, ok := strings.CutPrefix(urlPath, Prefix)
	if !ok {
		return "", false
	}
	if static, isStatic := strings.CutPrefix(rest, "static/"); isStatic {
		if static == "" || static != path.Clean(static) || strings.Contains(static, "/") {
			return "", false
		}
		return static, true
	}
	if !pages[strings.TrimSuffix(rest, "/")] {
		return "", false
	}
	return "index.html", true
}

// loadFiles reads every embedded asset once, with its type and an ETag
// of its content.
func loadFiles() map[string]file {
	files := map[string]file{}
	entries, err := fs.ReadDir(assets, "assets")
	if err != nil {
		panic(err) // the embed directive guarantees the directory
	}
	for _, e := range entries {
		body, err := fs.ReadFile(assets, "assets/"+e.Name())
		if err != nil {
			panic(err)
		}
		sum := sha256.Sum256(body)
		contentType := mime.TypeByExtension(path.Ext(e.Name()))
		if contentType == "" {
			contentType = "application/octet-stream"
		}
		files[e.Name()] = file{body: body, contentType: contentType, etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
	}
	return files
}
