package objstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"orderlog/tiering/objstore/s3test"
)

// opener opens an empty store of one backend for one test.
type opener func(t *testing.T, o Options) Store

// TestStores runs every behaviour both backends share against both: a
// directory, and a real S3 server with one prefix per test. Without
// versitygw (and with ORDERLOG_ALLOW_NO_S3=1) only the S3 half is skipped.
func TestStores(t *testing.T) {
	backends := []struct {
		name  string
		setup func(t *testing.T) opener
	}{
		{"file", func(*testing.T) opener { return openFileStore }},
		{"s3", startS3},
	}
	cases := []struct {
		name string
		run  func(t *testing.T, open opener)
	}{
		{"round_trip", testRoundTrip},
		{"put_existing", testPutExisting},
		{"concurrent_put", testConcurrentPut},
		{"multipart", testMultipart},
		{"multipart_existing", testMultipartExisting},
		{"range_out_of_bounds", testRangeOutOfBounds},
		{"not_found", testNotFound},
		{"list_pages", testListPages},
	}
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			open := b.setup(t)
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) { c.run(t, open) })
			}
		})
	}
}

func openFileStore(t *testing.T, o Options) Store {
	return mustOpen(t, "file://"+t.TempDir(), o)
}

// startS3 starts one server for all the cases; each opens its own prefix.
func startS3(t *testing.T) opener {
	server := s3test.Start(t)
	server.SetEnv(t)
	return func(t *testing.T, o Options) Store {
		o.Endpoint = server.Endpoint
		return mustOpen(t, "s3://"+server.Bucket+"/"+t.Name(), o)
	}
}

func mustOpen(t *testing.T, url string, o Options) Store {
	t.Helper()
	store, err := Open(context.Background(), url, o)
	if err != nil {
		t.Fatal(err)
	}
	return store
}

func put(t *testing.T, store Store, key string, data []byte) {
	t.Helper()
	if err := store.PutIfAbsent(context.Background(), key, bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
}

func get(t *testing.T, store Store, key string) []byte {
	t.Helper()
	data, err := store.Get(context.Background(), key)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	return data
}

func getRange(t *testing.T, store Store, key string, off, n int64) []byte {
	t.Helper()
	data, err := store.GetRange(context.Background(), key, off, n)
	if err != nil {
		t.Fatalf("get %s [%d, %d): %v", key, off, off+n, err)
	}
	return data
}

func list(t *testing.T, store Store, prefix string) string {
	t.Helper()
	objects, err := store.List(context.Background(), prefix)
	if err != nil {
		t.Fatalf("list %q: %v", prefix, err)
	}
	var out []string
	for _, o := range objects {
		out = append(out, fmt.Sprintf("%s:%d", o.Key, o.Size))
	}
	return strings.Join(out, " ")
}

func randomBytes(n int) []byte {
	data := make([]byte, n)
	rng := rand.NewChaCha8([32]byte{7})
	rng.Read(data)
	return data
}

func testRoundTrip(t *testing.T, open opener) {
	store := open(t, Options{})
	ctx := context.Background()
	for _, key := range []string{"z", "a/b/two", "a-c", "a/b/one"} {
		put(t, store, key, []byte("value of "+key))
	}
	if got := get(t, store, "a/b/one"); string(got) != "value of a/b/one" {
		t.Errorf("get a/b/one = %q", got)
	}
	if got := getRange(t, store, "a/b/one", 6, 4); string(got) != "of a" {
		t.Errorf("range [6, 10) of a/b/one = %q", got)
	}
	if size, err := store.Size(ctx, "a-c"); err != nil || size != 12 {
		t.Errorf("size a-c = %d, %v; want 12", size, err)
	}
	for prefix, want := range map[string]string{
		"":        "a-c:12 a/b/one:16 a/b/two:16 z:10",
		"a/":      "a/b/one:16 a/b/two:16",
		"a/b/t":   "a/b/two:16",
		"a":       "a-c:12 a/b/one:16 a/b/two:16",
		"nothing": "",
		"a/x/":    "",
	} {
		if got := list(t, store, prefix); got != want {
			t.Errorf("list %q = %q, want %q", prefix, got, want)
		}
	}
	if d := store.Describe(); !strings.HasPrefix(d, "file:///") && !strings.HasPrefix(d, "s3://") {
		t.Errorf("Describe() = %q", d)
	}
}

func testPutExisting(t *testing.T, open opener) {
	store := open(t, Options{})
	put(t, store, "k", []byte("first"))
	err := store.PutIfAbsent(context.Background(), "k", strings.NewReader("second!"), 7)
	if !errors.Is(err, ErrExists) {
		t.Fatalf("second put: %v, want ErrExists", err)
	}
	if got := get(t, store, "k"); string(got) != "first" {
		t.Errorf("after a refused put: %q, want %q", got, "first")
	}
}

// testConcurrentPut races 4 writers for one key, with one-part bodies and
// with multipart ones: exactly one wins, and its bytes are stored.
func testConcurrentPut(t *testing.T, open opener) {
	store := open(t, Options{PartSize: testPartSize})
	for _, size := range []int{10, 6 << 20} {
		t.Run(fmt.Sprint(size), func(t *testing.T) { racePuts(t, store, fmt.Sprint("race", size), size) })
	}
}

func racePuts(t *testing.T, store Store, key string, size int) {
	const writers = 4
	errs := make([]error, writers)
	var wg sync.WaitGroup
	for i := range writers {
		wg.Go(func() {
			body := bytes.Repeat([]byte{byte('a' + i)}, size)
			errs[i] = store.PutIfAbsent(context.Background(), key, bytes.NewReader(body), int64(size))
		})
	}
	wg.Wait()
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil && winner >= 0:
			t.Errorf("writers %d and %d both succeeded", winner, i)
		case err == nil:
			winner = i
		case !errors.Is(err, ErrExists):
			t.Errorf("writer %d: %v, want nil or ErrExists", i, err)
		}
	}
	if winner < 0 {
		t.Fatalf("no writer succeeded: %v", errs)
	}
	t.Logf("writer %d won; writer %d got %v", winner, (winner+1)%writers, errs[(winner+1)%writers])
	if got := get(t, store, key); !bytes.Equal(got, bytes.Repeat([]byte{byte('a' + winner)}, size)) {
		t.Errorf("stored bytes are not the winner's (writer %d)", winner)
	}
}

const testPartSize = 5 << 20

// testMultipart uploads 12 MiB in 5 MiB parts and reads it back across the
// part boundaries.
func testMultipart(t *testing.T, open opener) {
	store := open(t, Options{PartSize: testPartSize})
	data := randomBytes(12<<20 + 123)
	put(t, store, "big", data)
	if size, err := store.Size(context.Background(), "big"); err != nil || size != int64(len(data)) {
		t.Fatalf("size = %d, %v; want %d", size, err, len(data))
	}
	for _, boundary := range []int64{0, testPartSize, 2 * testPartSize, int64(len(data))} {
		off := max(boundary-1000, 0)
		n := min(off+2000, int64(len(data))) - off
		if got := getRange(t, store, "big", off, n); !bytes.Equal(got, data[off:off+n]) {
			t.Errorf("range [%d, %d) differs", off, off+n)
		}
	}
	if !bytes.Equal(get(t, store, "big"), data) {
		t.Error("the whole object differs")
	}
	if s3Store, ok := store.(*s3Store); ok {
		checkMultipartETag(t, s3Store, "big", 3)
	}
}

// checkMultipartETag checks that S3 stored key as an upload of parts parts:
// its ETag ends in "-parts".
func checkMultipartETag(t *testing.T, store *s3Store, key string, parts int) {
	t.Helper()
	head, err := store.client.HeadObject(context.Background(), &s3.HeadObjectInput{
		Bucket: &store.bucket, Key: aws.String(store.prefix + key),
	})
	if err != nil {
		t.Fatal(err)
	}
	if suffix := fmt.Sprintf("-%d\"", parts); !strings.HasSuffix(*head.ETag, suffix) {
		t.Errorf("ETag %s: want a %d-part upload", *head.ETag, parts)
	}
}

// testMultipartExisting completes a multipart upload onto a key that is
// there: refused, the object unchanged, and (S3) the upload aborted.
func testMultipartExisting(t *testing.T, open opener) {
	store := open(t, Options{PartSize: testPartSize})
	put(t, store, "k", []byte("small"))
	data := randomBytes(11 << 20)
	err := store.PutIfAbsent(context.Background(), "k", bytes.NewReader(data), int64(len(data)))
	if !errors.Is(err, ErrExists) {
		t.Fatalf("multipart put onto an object: %v, want ErrExists", err)
	}
	if got := get(t, store, "k"); string(got) != "small" {
		t.Errorf("after a refused multipart put: %d bytes, want %q", len(got), "small")
	}
	if s3Store, ok := store.(*s3Store); ok {
		checkNoUploads(t, s3Store)
	}
}

func checkNoUploads(t *testing.T, store *s3Store) {
	t.Helper()
	uploads, err := store.client.ListMultipartUploads(context.Background(), &s3.ListMultipartUploadsInput{
		Bucket: &store.bucket, Prefix: &store.prefix,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(uploads.Uploads) != 0 {
		t.Errorf("%d multipart uploads left, want every one aborted", len(uploads.Uploads))
	}
}

func testRangeOutOfBounds(t *testing.T, open opener) {
	store := open(t, Options{})
	put(t, store, "ten", []byte("0123456789"))
	for _, r := range []struct{ off, n int64 }{{5, 6}, {10, 1}, {100, 1}, {-1, 2}, {0, -1}} {
		data, err := store.GetRange(context.Background(), "ten", r.off, r.n)
		if err == nil || errors.Is(err, ErrNotFound) {
			t.Errorf("range off=%d n=%d: %q, %v; want a range error", r.off, r.n, data, err)
		}
	}
	if got := getRange(t, store, "ten", 0, 10); string(got) != "0123456789" {
		t.Errorf("whole range = %q", got)
	}
	if got := getRange(t, store, "ten", 10, 0); len(got) != 0 {
		t.Errorf("empty range = %q", got)
	}
}

func testNotFound(t *testing.T, open opener) {
	store := open(t, Options{})
	ctx := context.Background()
	put(t, store, "dir/there", []byte("x"))
	for _, key := range []string{"missing", "dir/missing", "dir"} {
		if _, err := store.Get(ctx, key); !errors.Is(err, ErrNotFound) {
			t.Errorf("get %s: %v, want ErrNotFound", key, err)
		}
		if _, err := store.GetRange(ctx, key, 0, 1); !errors.Is(err, ErrNotFound) {
			t.Errorf("range of %s: %v, want ErrNotFound", key, err)
		}
		if _, err := store.Size(ctx, key); !errors.Is(err, ErrNotFound) {
			t.Errorf("size of %s: %v, want ErrNotFound", key, err)
		}
	}
}

// testListPages lists 30 keys put in random order; S3 returns them 7 to a
// page.
func testListPages(t *testing.T, open opener) {
	store := open(t, Options{})
	if s3Store, ok := store.(*s3Store); ok {
		s3Store.pageSize = 7
	}
	var want []string
	for i := range 30 {
		want = append(want, fmt.Sprintf("seg/%02d:1", i))
	}
	for _, i := range rand.New(rand.NewPCG(1, 2)).Perm(30) {
		put(t, store, fmt.Sprintf("seg/%02d", i), []byte{byte(i)})
	}
	if got := list(t, store, "seg/"); got != strings.Join(want, " ") {
		t.Errorf("list = %q\nwant %q", got, strings.Join(want, " "))
	}
}

// TestS3WrongSecret: a refused signature fails at once (no retries) with an
// error that says so.
func TestS3WrongSecret(t *testing.T) {
	server := s3test.Start(t)
	server.SetEnv(t)
	t.Setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
	store := mustOpen(t, "s3://"+server.Bucket, Options{Endpoint: server.Endpoint})
	start := time.Now()
	err := store.PutIfAbsent(context.Background(), "k", strings.NewReader("x"), 1)
	if err == nil || !strings.Contains(err.Error(), "refused the credentials (403") {
		t.Fatalf("put with a wrong secret: %v, want a credentials error", err)
	}
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Errorf("the credentials error took %v, want < 5 s", elapsed)
	}
	if _, err := store.List(context.Background(), ""); err == nil || !strings.Contains(err.Error(), "credentials") {
		t.Errorf("list with a wrong secret: %v, want a credentials error", err)
	}
	t.Logf("after %v: %v", time.Since(start), err)
}

// TestS3ServerDown: with the server stopped a put fails after the SDK's few
// retries; once it is back, the same store works again.
func TestS3ServerDown(t *testing.T) {
	server := s3test.Start(t)
	server.SetEnv(t)
	store := mustOpen(t, "s3://"+server.Bucket+"/down", Options{Endpoint: server.Endpoint})
	put(t, store, "before", []byte("kept"))
	server.Stop()

	start := time.Now()
	err := store.PutIfAbsent(context.Background(), "during", strings.NewReader("x"), 1)
	elapsed := time.Since(start)
	if err == nil {
		t.Fatal("put to a stopped server succeeded")
	}
	if elapsed > 5*time.Second {
		t.Errorf("put to a stopped server failed after %v, want < 5 s", elapsed)
	}
	t.Logf("down: failed after %v: %v", elapsed, err)

	server.Restart()
	put(t, store, "during", []byte("x"))
	if got := get(t, store, "before"); string(got) != "kept" {
		t.Errorf("after the restart: %q, want %q", got, "kept")
	}
}

// TestS3WholeBucket: with no prefix, a bucket that saw one-part, multipart
// and refused multipart uploads lists exactly the objects written: the
// server's staging of parts is invisible.
func TestS3WholeBucket(t *testing.T) {
	server := s3test.Start(t)
	server.SetEnv(t)
	store := mustOpen(t, "s3://"+server.Bucket, Options{Endpoint: server.Endpoint, PartSize: testPartSize})
	if d := store.Describe(); d != "s3://"+server.Bucket {
		t.Errorf("Describe() = %q", d)
	}
	data := randomBytes(6 << 20)
	put(t, store, "small", []byte("x"))
	put(t, store, "big", data)
	err := store.PutIfAbsent(context.Background(), "big", bytes.NewReader(data), int64(len(data)))
	if !errors.Is(err, ErrExists) {
		t.Fatalf("second multipart put: %v, want ErrExists", err)
	}
	if got, want := list(t, store, ""), "big:6291456 small:1"; got != want {
		t.Errorf("list = %q, want %q", got, want)
	}
	checkNoUploads(t, store.(*s3Store))
}

func TestFileKeys(t *testing.T) {
	store := mustOpen(t, "file://"+t.TempDir(), Options{})
	ctx := context.Background()
	for _, key := range []string{"", "/abs", "..", "a/../b", "a/..", "./a", "a//b", "a/", ".tmp", ".tmp/x", ".tmpx"} {
		if err := store.PutIfAbsent(ctx, key, strings.NewReader("x"), 1); err == nil {
			t.Errorf("put %q succeeded, want an invalid key", key)
		}
		if _, err := store.Get(ctx, key); err == nil || errors.Is(err, ErrNotFound) {
			t.Errorf("get %q: %v, want an invalid key", key, err)
		}
	}
	for _, prefix := range []string{"/", "../", "a/../"} {
		if _, err := store.List(ctx, prefix); err == nil {
			t.Errorf("list %q succeeded, want an invalid prefix", prefix)
		}
	}
	put(t, store, "a/b", []byte("x"))
	err := store.PutIfAbsent(ctx, "a", strings.NewReader("x"), 1)
	if err == nil || errors.Is(err, ErrExists) {
		t.Errorf("put onto a directory of keys: %v, want an error that is not ErrExists", err)
	}
}

// TestFileNoStagingLeft: refused and failed puts leave nothing in .tmp, and
// List never shows it.
func TestFileNoStagingLeft(t *testing.T) {
	root := t.TempDir()
	store := mustOpen(t, "file://"+root, Options{})
	ctx := context.Background()
	put(t, store, "k", []byte("first"))
	if err := store.PutIfAbsent(ctx, "k", strings.NewReader("again"), 5); !errors.Is(err, ErrExists) {
		t.Fatalf("duplicate put: %v, want ErrExists", err)
	}
	if err := store.PutIfAbsent(ctx, "short", strings.NewReader("abc"), 10); err == nil {
		t.Fatal("put of a body shorter than its size succeeded")
	}
	staged, err := os.ReadDir(filepath.Join(root, stagingDir))
	if err != nil || len(staged) != 0 {
		t.Errorf("staging directory: %v, %v; want empty", staged, err)
	}
	if got := list(t, store, ""); got != "k:5" {
		t.Errorf("list = %q, want %q", got, "k:5")
	}
	if d := store.Describe(); d != "file://"+root {
		t.Errorf("Describe() = %q, want %q", d, "file://"+root)
	}
}

func TestOpenErrors(t *testing.T) {
	for _, url := range []string{"", "http://x", "s3://", "file://"} {
		if _, err := Open(context.Background(), url, Options{}); err == nil {
			t.Errorf("Open(%q) succeeded", url)
		}
	}
	if _, err := Open(context.Background(), "s3://b", Options{PartSize: 1 << 20}); err == nil {
		t.Error("Open with a 1 MiB S3 part size succeeded")
	}
}
