package apierr

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// httpBody is the JSON shape of every HTTP error answer.
type httpBody struct {
	Error struct {
		Code      Code              `json:"code"`
		Class     Class             `json:"class"`
		Message   string            `json:"message"`
		Retryable bool              `json:"retryable"`
		Details   map[string]string `json:"details,omitempty"`
	} `json:"error"`
}

// retryAfter is the Retry-After header (seconds) of the codes that carry
// one. DISK_FULL is a 503 with Retry-After rather than WebDAV's 507:
// HTTP clients and proxies retry a 503 and honour the header, and the
// code tells it from UNAVAILABLE. A full disk frees space only when
// retention deletes ledgers, so a client had better pause (or go to
// another node) than spin. IDEMPOTENCY_KEY_IN_FLIGHT (409) waits for the
// first request's outcome, which takes about an ack's latency.
// LIMIT_EXCEEDED (429) waits for one of the principal's streams or
// sessions to end, which nothing here can foresee.
var retryAfter = map[Code]string{DiskFull: "1", IdempotencyKeyInFlight: "1", LimitExceeded: "1"}

// WriteHTTP answers an HTTP request with err, mapped through the catalogue.
func WriteHTTP(w http.ResponseWriter, err error) {
	apiErr := As(err)
	var body httpBody
	body.Error.Code = apiErr.Code
	body.Error.Class = apiErr.Class()
	body.Error.Message = apiErr.Message
	body.Error.Retryable = apiErr.Class() == ClassRetry
	body.Error.Details = apiErr.Details
	w.Header().Set("Content-Type", "application/json")
	if after, ok := retryAfter[apiErr.Code]; ok {
		w.Header().Set("Retry-After", after)
	}
	if ms, ok := apiErr.Details["retry_after_ms"]; ok && (apiErr.Code == QuotaExceeded || apiErr.Code == LimitExceeded) {
		w.Header().Set("Retry-After", retryAfterSeconds(ms))
	}
	w.WriteHeader(apiErr.HTTPStatus())
	_ = json.NewEncoder(w).Encode(body)
}

// retryAfterSeconds rounds a retry_after_ms detail up to whole seconds, as
// the Retry-After header counts them.
func retryAfterSeconds(ms string) string {
	n, err := strconv.ParseInt(ms, 10, 64)
	if err != nil || n <= 0 {
		return "1"
	}
	return strconv.FormatInt((n+999)/1000, 10)
}
