package httpapi

import (
	"mime"
	"net/http"
	"strconv"
	"strings"

	"orderlog/internal/apierr"
	"orderlog/internal/arrowpage"
	"orderlog/proto/orderlogpb"
)

// GET /v1/messages answers an Arrow IPC stream (arrowpage.ContentType)
// instead of JSON when the request's Accept header prefers it: the page's
// messages as one record batch of the archive's schema, and its paging in
// the stream's schema metadata (orderlog.next_offset, orderlog.committed,
// orderlog.skipped) and, with the same values, in the response headers
// below. Errors stay JSON.

// The response headers that carry an Arrow page's paging: the values of
// the schema metadata keys arrowpage.KeyNextOffset, KeyCommitted and
// KeySkipped, in that order.
const (
	HeaderNextOffset = "Orderlog-Next-Offset"
	HeaderCommitted  = "Orderlog-Committed"
	HeaderSkipped    = "Orderlog-Skipped"
)

// AcceptsArrow reports whether an Accept header asks for an Arrow IPC
// stream: it names arrowpage.ContentType with a quality above that of
// application/json (0 when not named). Anything else, no header, */*, an
// unknown type, keeps JSON, the default.
func AcceptsArrow(header http.Header) bool {
	arrowQ, jsonQ := 0.0, 0.0
	for _, value := range header.Values("Accept") {
		for _, part := range strings.Split(value, ",") {
			mediaType, params, err := mime.ParseMediaType(strings.TrimSpace(part))
			if err != nil {
				continue
			}
			q := 1.0
			if text, ok := params["q"]; ok {
				if q, err = strconv.ParseFloat(text, 64); err != nil {
					continue
				}
			}
			switch mediaType {
			case arrowpage.ContentType:
				arrowQ = max(arrowQ, q)
			case "application/json":
				jsonQ = max(jsonQ, q)
			}
		}
	}
	return arrowQ > 0 && arrowQ > jsonQ
}

// writeArrow answers with the page as an Arrow IPC stream. The stream is
// encoded whole before anything is written (a page is bounded, 4 MiB of
// messages), so a failure is still answered as a JSON error.
func writeArrow(w http.ResponseWriter, page *orderlogpb.ReadResponse) {
	body, err := arrowpage.Encode(page)
	if err != nil {
		apierr.WriteHTTP(w, apierr.New(apierr.Internal, "encode the page as Arrow: %v", err))
		return
	}
	md := arrowpage.Metadata(page)
	h := w.Header()
	h.Set("Content-Type", arrowpage.ContentType)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	for i, name := range []string{HeaderNextOffset, HeaderCommitted, HeaderSkipped} {
		h.Set(name, md.Values()[i])
	}
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}
