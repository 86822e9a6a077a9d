package apierr

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestEveryCodeIsMappedAndRoundTripsThroughGRPC(t *testing.T) {
	for code, m := range catalogue {
		err := New(code, "something about %d", 7)
		st, ok := status.FromError(err)
		if !ok || st.Code() != m.grpc {
			t.Fatalf("%s: grpc status %v, want %v", code, st.Code(), m.grpc)
		}
		back := FromGRPC(st.Err())
		if back.Code != code || back.Message != "something about 7" {
			t.Fatalf("%s: round trip gave %+v", code, back)
		}
	}
}

func TestFromGRPCMapsTransportFailures(t *testing.T) {
	cases := map[codes.Code]Code{
		codes.Unavailable:      Unavailable,
		codes.DeadlineExceeded: Timeout,
		codes.Unknown:          Internal,
	}
	for grpcCode, want := range cases {
		got := FromGRPC(status.Error(grpcCode, "connection refused"))
		if got.Code != want {
			t.Errorf("%v: got %s, want %s", grpcCode, got.Code, want)
		}
	}
}

func TestAsFindsWrappedErrorsAndWrapsUnknownOnesAsInternal(t *testing.T) {
	wrapped := fmt.Errorf("produce: %w", New(ProducerFenced, "epoch 3 < 4"))
	if got := As(wrapped); got.Code != ProducerFenced {
		t.Fatalf("got %s", got.Code)
	}
	if got := As(errors.New("disk on fire")); got.Code != Internal || got.Class() != ClassServer {
		t.Fatalf("got %+v", got)
	}
}

func TestWriteHTTPAnswersStatusAndStableBody(t *testing.T) {
	rec := httptest.NewRecorder()
	WriteHTTP(rec, New(OutOfOrderSequence, "expected seq 5").With("expected_seq", "5"))
	if rec.Code != 409 {
		t.Fatalf("status %d", rec.Code)
	}
	var body httpBody
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatal(err)
	}
	if body.Error.Code != OutOfOrderSequence || body.Error.Details["expected_seq"] != "5" || body.Error.Retryable {
		t.Fatalf("body %+v", body)
	}
}

// DISK_FULL is retryable: gRPC RESOURCE_EXHAUSTED, HTTP 503 with a
// Retry-After header.
func TestDiskFullIsRetryableWithRetryAfter(t *testing.T) {
	err := New(DiskFull, "disk 93%% used")
	if err.Class() != ClassRetry {
		t.Fatalf("class %s", err.Class())
	}
	if st, _ := status.FromError(err); st.Code() != codes.ResourceExhausted {
		t.Fatalf("grpc %v", st.Code())
	}
	rec := httptest.NewRecorder()
	WriteHTTP(rec, err)
	if rec.Code != 503 || rec.Header().Get("Retry-After") != "1" {
		t.Fatalf("HTTP %d, Retry-After %q", rec.Code, rec.Header().Get("Retry-After"))
	}
	rec = httptest.NewRecorder()
	WriteHTTP(rec, New(Unavailable, "no leader"))
	if rec.Header().Get("Retry-After") != "" {
		t.Fatal("UNAVAILABLE carries a Retry-After")
	}
}

// LIMIT_EXCEEDED's Retry-After is its retry_after_ms in whole seconds
// (a producer session's may be minutes), else 1.
func TestLimitExceededRetryAfterFollowsItsDetail(t *testing.T) {
	for ms, want := range map[string]string{"": "1", "1000": "1", "299500": "300"} {
		err := New(LimitExceeded, "at the limit")
		if ms != "" {
			err = err.With("retry_after_ms", ms)
		}
		rec := httptest.NewRecorder()
		WriteHTTP(rec, err)
		if rec.Code != 429 || rec.Header().Get("Retry-After") != want {
			t.Errorf("retry_after_ms %q: HTTP %d, Retry-After %q, want %s", ms, rec.Code, rec.Header().Get("Retry-After"), want)
		}
	}
}
