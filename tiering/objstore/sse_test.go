package objstore

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"orderlog/tiering/objstore/s3test"
)

// sentRequest is what recordingTransport keeps of one request.
type sentRequest struct {
	method, query  string
	sse, kmsKeyID  string
	uploadID, part bool
}

// recordingTransport records the SSE headers of every request the SDK
// sends, then sends it: what went on the wire, whatever the server does
// with it.
type recordingTransport struct {
	mu   sync.Mutex
	sent []sentRequest
}

func (r *recordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	q := req.URL.Query()
	r.mu.Lock()
	r.sent = append(r.sent, sentRequest{method: req.Method, query: req.URL.RawQuery,
		sse:      req.Header.Get("X-Amz-Server-Side-Encryption"),
		kmsKeyID: req.Header.Get("X-Amz-Server-Side-Encryption-Aws-Kms-Key-Id"),
		uploadID: q.Has("uploadId"), part: q.Has("partNumber")})
	r.mu.Unlock()
	return http.DefaultTransport.RoundTrip(req)
}

// requests returns the recorded requests and forgets them.
func (r *recordingTransport) requests() []sentRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.sent
	r.sent = nil
	return out
}

// TestS3ServerSideEncryption runs one-part and multipart puts against
// versitygw with --s3-sse's settings and checks the requests that create
// an object (PutObject, CreateMultipartUpload) carry the SSE headers,
// and the others (parts, completion, reads) none, as S3 requires. It
// logs what HeadObject answers: versitygw v1.8.0 accepts the headers and
// answers no ServerSideEncryption (it does not implement SSE), so that S3
// encrypts is AWS's to honour and is not asserted here.
func TestS3ServerSideEncryption(t *testing.T) {
	server := s3test.Start(t)
	server.SetEnv(t)
	cases := map[string]Options{
		"sse_s3":      {SSE: SSES3},
		"sse_kms_key": {SSE: SSEKMS, SSEKMSKeyID: "arn:aws:kms:us-east-1:111122223333:key/orderlog-test"},
		"none":        {},
	}
	for name, o := range cases {
		t.Run(name, func(t *testing.T) {
			o.Endpoint, o.PartSize = server.Endpoint, testPartSize
			store := mustOpen(t, "s3://"+server.Bucket+"/"+name, o).(*s3Store)
			rec := &recordingTransport{}
			store.client = s3.New(store.client.Options(), func(so *s3.Options) {
				so.HTTPClient = &http.Client{Transport: rec}
			})
			ctx := context.Background()
			put(t, store, "small", []byte("x"))
			put(t, store, "big", randomBytes(testPartSize+1))
			creates, others := 0, 0
			for _, r := range rec.requests() {
				creating := r.method == http.MethodPut && !r.part || r.method == http.MethodPost && strings.HasPrefix(r.query, "uploads")
				if creating {
					creates++
					if r.sse != o.SSE || r.kmsKeyID != o.SSEKMSKeyID {
						t.Errorf("%s ?%s: SSE %q, KMS key %q; want %q, %q", r.method, r.query, r.sse, r.kmsKeyID, o.SSE, o.SSEKMSKeyID)
					}
					continue
				}
				others++
				if r.sse != "" || r.kmsKeyID != "" {
					t.Errorf("%s ?%s carries SSE headers %q %q", r.method, r.query, r.sse, r.kmsKeyID)
				}
			}
			if creates != 2 || others < 2 {
				t.Fatalf("%d requests created objects and %d others, want 2 and the parts and completion", creates, others)
			}
			head, err := store.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &store.bucket, Key: aws.String(store.prefix + "big")})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("HeadObject: ServerSideEncryption %q, SSEKMSKeyId %q", head.ServerSideEncryption, aws.ToString(head.SSEKMSKeyId))
		})
	}
}

// TestS3SSEOptionsChecked: a value S3 does not know, or a KMS key id
// without aws:kms, is refused at Open.
func TestS3SSEOptionsChecked(t *testing.T) {
	for _, o := range []Options{{SSE: "aes256"}, {SSE: "kms"}, {SSEKMSKeyID: "k"}, {SSE: SSES3, SSEKMSKeyID: "k"}} {
		if _, err := Open(context.Background(), "s3://bucket", o); err == nil || !strings.Contains(err.Error(), "server-side encryption") && !strings.Contains(err.Error(), "KMS") {
			t.Errorf("Open with %+v: %v, want a refusal", o, err)
		}
	}
}
