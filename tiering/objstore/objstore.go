// Package objstore is the archive's object store: the one place where the
// tiering worker writes Parquet files and manifest segments, and where readers
// fetch byte ranges of them. It owns the mapping from a key to bytes in one
// of two backends: a local directory ("file://PATH") or an S3 bucket
// ("s3://BUCKET/PREFIX").
//
// Invariants, for both backends:
//   - An object is written once, directly under its final key, and never
//     changes: PutIfAbsent fails with ErrExists when any object is already
//     there, atomically, so two writers racing for a key cannot both win.
//   - Nothing temporary is ever written under the store's keys. The file
//     backend stages bytes in ROOT/.tmp, which no key can name; the S3
//     backend stages multipart uploads, which S3 keeps outside the key space
//     until the upload completes.
//
// The package must never overwrite an object, never write a temporary object
// under the prefix, and never delete anything: retention of the archive is
// not its business.
//
// Keys are "/"-separated and relative to the store's root or prefix. A key
// must not be empty, start with "/", contain an empty, "." or ".." segment, or
// start with ".tmp"; both backends reject such keys the same way.
package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
)

// ErrExists is returned by PutIfAbsent when an object is already stored under
// the key (S3: 412 Precondition Failed, or 409 ConditionalRequestConflict when
// another upload of the key completes at the same time).
var ErrExists = errors.New("objstore: an object is already there")

// ErrNotFound is returned by Get, GetRange and Size when no object is stored
// under the key.
var ErrNotFound = errors.New("objstore: no such object")

// Object is one entry of a List.
type Object struct {
	Key  string // relative to the store's root or prefix
	Size int64  // in bytes
}

// Store is an object store whose objects, once written, never change.
// A Store is safe for concurrent use.
type Store interface {
	// PutIfAbsent writes size bytes of body under key unless an object is
	// there (ErrExists). Bodies above the store's part size go up as a
	// multipart upload completed with If-None-Match: *.
	PutIfAbsent(ctx context.Context, key string, body io.ReaderAt, size int64) error
	// Get returns the whole object (ErrNotFound).
	Get(ctx context.Context, key string) ([]byte, error)
	// GetRange returns exactly n bytes from offset off, or an error
	// (ErrNotFound, or a range beyond the object's end). n == 0 returns an
	// empty slice without looking at the store.
	GetRange(ctx context.Context, key string, off, n int64) ([]byte, error)
	// Size returns the object's size in bytes (ErrNotFound).
	Size(ctx context.Context, key string) (int64, error)
	// List returns the objects whose keys start with prefix, in
	// lexicographic key order (all pages).
	List(ctx context.Context, prefix string) ([]Object, error)
	// Describe is for logs and errors: "file:///abs/path" or
	// "s3://bucket/prefix".
	Describe() string
}

// Options configure Open. The file backend ignores them.
type Options struct {
	// Endpoint is the S3 endpoint URL (e.g. http://127.0.0.1:7070), addressed
	// path-style; empty: the SDK's default for the region.
	Endpoint string
	// Region is the S3 region; empty: the AWS chain's (AWS_REGION, profile),
	// else "us-east-1".
	Region string
	// PartSize is the multipart part size; default 16 MiB; minimum 5 MiB for
	// S3 (S3's own minimum for every part but the last).
	PartSize int64
	// SSE asks S3 to encrypt every object it stores (server-side
	// encryption, the x-amz-server-side-encryption header on PutObject and
	// CreateMultipartUpload): "" (the bucket's default), "AES256" (SSE-S3)
	// or "aws:kms" (SSE-KMS, with SSEKMSKeyID, else the account's default
	// KMS key). The S3 server holds the keys: it protects the disks behind
	// S3, not the objects from whoever may read the bucket.
	SSE         string
	SSEKMSKeyID string
	// Credentials come from the standard AWS chain (env AWS_ACCESS_KEY_ID /
	// AWS_SECRET_ACCESS_KEY, profiles, ...).
}

const (
	defaultPartSize = 16 << 20
	minS3PartSize   = 5 << 20
	defaultRegion   = "us-east-1"
)

// Open opens "file://PATH" (a directory, created if missing) or
// "s3://BUCKET/PREFIX" (PREFIX may be empty). Keys given to the Store are
// relative to PATH or PREFIX.
func Open(ctx context.Context, url string, o Options) (Store, error) {
	if o.PartSize == 0 {
		o.PartSize = defaultPartSize
	}
	switch {
	case strings.HasPrefix(url, "file://"):
		return openFile(strings.TrimPrefix(url, "file://"))
	case strings.HasPrefix(url, "s3://"):
		bucket, prefix, _ := strings.Cut(strings.TrimPrefix(url, "s3://"), "/")
		return openS3(ctx, bucket, prefix, o)
	}
	return nil, fmt.Errorf("objstore: %q: want file://PATH or s3://BUCKET/PREFIX", url)
}

// checkKey rejects keys that could escape the root, alias another key, or
// name the file backend's staging directory.
func checkKey(key string) error {
	if key == "" || strings.HasPrefix(key, "/") || strings.HasPrefix(key, ".tmp") {
		return fmt.Errorf("objstore: invalid key %q", key)
	}
	for _, segment := range strings.Split(key, "/") {
		if segment == "" || segment == "." || segment == ".." {
			return fmt.Errorf("objstore: invalid key %q", key)
		}
	}
	return nil
}

// checkPrefix rejects list prefixes that could leave the root.
func checkPrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	if strings.HasPrefix(prefix, "/") {
		return fmt.Errorf("objstore: invalid prefix %q", prefix)
	}
	for _, segment := range strings.Split(prefix, "/") {
		if segment == "." || segment == ".." {
			return fmt.Errorf("objstore: invalid prefix %q", prefix)
		}
	}
	return nil
}

// checkRange rejects negative offsets and lengths before any I/O.
func checkRange(key string, off, n int64) error {
	if off < 0 || n < 0 {
		return fmt.Errorf("objstore: %s: invalid range off=%d n=%d", key, off, n)
	}
	return nil
}

// shortRangeError is GetRange's error when the object ends before off+n.
func shortRangeError(where string, off, n, got int64) error {
	return fmt.Errorf("objstore: %s: range [%d, %d) is beyond the object's end (got %d bytes)",
		where, off, off+n, got)
}
