package httpapi

import (
	"bytes"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"

	"orderlog/internal/apierr"
	"orderlog/internal/arrowpage"
	"orderlog/tiering/parquetfile"
)

func TestAcceptsArrowOnlyWhenPreferredOverJSON(t *testing.T) {
	for accept, want := range map[string]bool{
		"":                                    false,
		"*/*":                                 false,
		"text/csv":                            false,
		"application/json":                    false,
		"application/vnd.apache.arrow.stream": true,
		"Application/VND.Apache.Arrow.Stream": true,
		"application/vnd.apache.arrow.stream; q=0":                      false,
		"application/json, application/vnd.apache.arrow.stream":         false,
		"application/json;q=0.5, application/vnd.apache.arrow.stream":   true,
		"application/vnd.apache.arrow.stream;q=0.9, application/json":   false,
		"text/html, application/vnd.apache.arrow.stream;q=0.8, */*;q=1": true,
		"application/vnd.apache.arrow.file":                             false,
	} {
		if got := AcceptsArrow(http.Header{"Accept": {accept}}); got != want {
			t.Errorf("Accept %q: arrow %v, want %v", accept, got, want)
		}
	}
}

// An Arrow read answers the service's page as an IPC stream of the
// archive's schema; its paging is in the schema metadata and, the same
// strings, in the headers.
func TestReadAnswersArrowWithPagingInMetadataAndHeaders(t *testing.T) {
	rec := serve(t, &recordingService{}, "GET", "/v1/messages?offset=5", "", http.Header{"Accept": {arrowpage.ContentType}})
	if rec.Code != 200 || rec.Header().Get("Content-Type") != arrowpage.ContentType {
		t.Fatalf("status %d, content type %q: %s", rec.Code, rec.Header().Get("Content-Type"), rec.Body)
	}
	r, err := ipc.NewReader(bytes.NewReader(rec.Body.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release()
	if !r.Schema().Equal(parquetfile.ArrowSchema()) {
		t.Fatalf("schema %v", r.Schema())
	}
	want := map[string]string{
		arrowpage.KeyNextOffset: "9", arrowpage.KeyCommitted: "9", arrowpage.KeySkipped: `[{"first":6,"end":8}]`,
	}
	headers := map[string]string{arrowpage.KeyNextOffset: HeaderNextOffset, arrowpage.KeyCommitted: HeaderCommitted, arrowpage.KeySkipped: HeaderSkipped}
	md := r.Schema().Metadata()
	for key, value := range want {
		if got, _ := md.GetValue(key); got != value {
			t.Errorf("metadata %s = %q, want %q", key, got, value)
		}
		if got := rec.Header().Get(headers[key]); got != value {
			t.Errorf("header %s = %q, want %q", headers[key], got, value)
		}
	}
	var offsets []int64
	for r.Next() {
		offsets = append(offsets, r.RecordBatch().Column(0).(*array.Int64).Int64Values()...)
	}
	if r.Err() != nil || len(offsets) != 2 || offsets[0] != 5 || offsets[1] != 8 {
		t.Fatalf("log_offset column %v (err %v), want [5 8]", offsets, r.Err())
	}
}

func TestArrowReadErrorsStayJSON(t *testing.T) {
	svc := &recordingService{refuse: apierr.New(apierr.OffsetOutOfRange, "below the log start").With("log_start", "7")}
	rec := serve(t, svc, "GET", "/v1/messages?offset=1", "", http.Header{"Accept": {arrowpage.ContentType}})
	var body struct {
		Error struct {
			Code    string            `json:"code"`
			Details map[string]string `json:"details"`
		} `json:"error"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || rec.Code != http.StatusRequestedRangeNotSatisfiable ||
		body.Error.Code != "OFFSET_OUT_OF_RANGE" || body.Error.Details["log_start"] != "7" {
		t.Fatalf("status %d, body %s (%v)", rec.Code, rec.Body, err)
	}
	rec = serve(t, &recordingService{}, "GET", "/v1/messages?limit=x", "", http.Header{"Accept": {arrowpage.ContentType}})
	if rec.Code != http.StatusBadRequest || rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("a bad limit: status %d, %q", rec.Code, rec.Header().Get("Content-Type"))
	}
}

func TestReadWithOtherAcceptStaysJSON(t *testing.T) {
	rec := serve(t, &recordingService{}, "GET", "/v1/messages", "", http.Header{"Accept": {"text/csv"}})
	var page jsonReadResponse
	if err := json.Unmarshal(rec.Body.Bytes(), &page); err != nil || rec.Code != 200 || page.NextOffset != 9 || len(page.Messages) != 2 {
		t.Fatalf("status %d, body %s (%v)", rec.Code, rec.Body, err)
	}
	if rec.Header().Get("Vary") != "Accept" {
		t.Fatalf("Vary %q, want Accept", rec.Header().Get("Vary"))
	}
}
