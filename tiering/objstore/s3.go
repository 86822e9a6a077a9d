package objstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
)

const (
	// maxAttempts bounds the SDK's attempts per call: a server that is down
	// fails a call in about a second, and the caller decides when to retry.
	maxAttempts = 3
	maxBackoff  = time.Second
	// maxParts is S3's limit of parts in one multipart upload.
	maxParts = 10000
	// abortTimeout bounds the abort of a failed multipart upload, which runs
	// even when the caller's context is done.
	abortTimeout = 30 * time.Second
)

// s3Store keeps each object under prefix+key in one bucket, written with
// If-None-Match: * so that S3 itself refuses to overwrite.
type s3Store struct {
	client   *s3.Client
	bucket   string
	prefix   string // "" or ending in "/"
	partSize int64
	pageSize int32 // ListObjectsV2 MaxKeys; 0: the server's default (1000)
	// sse and sseKMSKeyID go on every PutObject and CreateMultipartUpload
	// ("": none).
	sse         types.ServerSideEncryption
	sseKMSKeyID *string
}

// SSE values Options.SSE accepts besides "" (no header).
const (
	SSES3  = string(types.ServerSideEncryptionAes256)
	SSEKMS = string(types.ServerSideEncryptionAwsKms)
)

// checkSSE rejects an SSE setting S3 would refuse or ignore.
func checkSSE(o Options) error {
	switch {
	case o.SSE != "" && o.SSE != SSES3 && o.SSE != SSEKMS:
		return fmt.Errorf("objstore: server-side encryption %q: want %s or %s", o.SSE, SSES3, SSEKMS)
	case o.SSEKMSKeyID != "" && o.SSE != SSEKMS:
		return fmt.Errorf("objstore: a KMS key id needs server-side encryption %s", SSEKMS)
	}
	return nil
}

func openS3(ctx context.Context, bucket, prefix string, o Options) (*s3Store, error) {
	if bucket == "" {
		return nil, errors.New("objstore: s3:// needs a bucket")
	}
	if o.PartSize < minS3PartSize {
		return nil, fmt.Errorf("objstore: part size %d is below S3's minimum of 5 MiB", o.PartSize)
	}
	if err := checkSSE(o); err != nil {
		return nil, err
	}
	client, err := newS3Client(ctx, o)
	if err != nil {
		return nil, fmt.Errorf("objstore: s3://%s: %w", bucket, err)
	}
	if prefix = strings.Trim(prefix, "/"); prefix != "" {
		prefix += "/"
	}
	store := &s3Store{client: client, bucket: bucket, prefix: prefix, partSize: o.PartSize, sse: types.ServerSideEncryption(o.SSE)}
	if o.SSEKMSKeyID != "" {
		store.sseKMSKeyID = aws.String(o.SSEKMSKeyID)
	}
	return store, nil
}

// newS3Client loads the AWS chain's credentials and region and builds a
// client addressing o.Endpoint path-style, as local S3 servers need.
func newS3Client(ctx context.Context, o Options) (*s3.Client, error) {
	cfg, err := config.LoadDefaultConfig(ctx, config.WithRetryer(newRetryer))
	if err != nil {
		return nil, fmt.Errorf("load AWS config: %w", err)
	}
	cfg.Region = cmp.Or(o.Region, cfg.Region, defaultRegion)
	return s3.NewFromConfig(cfg, func(so *s3.Options) {
		// Ranged GETs carry no checksum to validate; without this the SDK
		// logs a line to stderr for each.
		so.DisableLogOutputChecksumValidationSkipped = true
		if o.Endpoint != "" {
			so.BaseEndpoint = aws.String(o.Endpoint)
			so.UsePathStyle = true
		}
	}), nil
}

// newRetryer is the SDK's standard retryer with at most maxAttempts attempts,
// no retry of a 4xx answer (wrong credentials fail at once), and no retry
// quota shared across calls (each call gets its attempts, whatever failed
// before it).
func newRetryer() aws.Retryer {
	return retry.NewStandard(func(o *retry.StandardOptions) {
		o.MaxAttempts = maxAttempts
		o.MaxBackoff = maxBackoff
		o.RateLimiter = ratelimit.None
		o.Retryables = append([]retry.IsErrorRetryable{noRetryOnClientError{}}, o.Retryables...)
	})
}

// noRetryOnClientError says "do not retry" to a 4xx answer except 429 Too
// Many Requests and S3's 400 RequestTimeout, which are the server's
// trouble, not the request's.
type noRetryOnClientError struct{}

func (noRetryOnClientError) IsErrorRetryable(err error) aws.Ternary {
	status, code := statusAndCode(err)
	if status >= 400 && status < 500 && status != http.StatusTooManyRequests && code != "RequestTimeout" {
		return aws.FalseTernary
	}
	return aws.UnknownTernary
}

// statusAndCode returns the HTTP status and the S3 error code of err, zero
// values where err has none.
func statusAndCode(err error) (int, string) {
	var withStatus interface{ HTTPStatusCode() int }
	var apiErr smithy.APIError
	status, code := 0, ""
	if errors.As(err, &withStatus) {
		status = withStatus.HTTPStatusCode()
	}
	if errors.As(err, &apiErr) {
		code = apiErr.ErrorCode()
	}
	return status, code
}

func (s *s3Store) Describe() string {
	if s.prefix == "" {
		return "s3://" + s.bucket
	}
	return "s3://" + s.bucket + "/" + strings.TrimSuffix(s.prefix, "/")
}

// fail turns an SDK error into ErrExists, ErrNotFound, a credentials error or
// a wrapped error naming the operation and the object.
func (s *s3Store) fail(op, key string, err error) error {
	status, code := statusAndCode(err)
	where := s.Describe() + "/" + key
	switch {
	case status == http.StatusPreconditionFailed || code == "PreconditionFailed" || code == "ConditionalRequestConflict":
		return fmt.Errorf("%s: %w", where, ErrExists)
	case code == "NoSuchBucket":
		return fmt.Errorf("objstore: %s: %s: no bucket %q: %w", op, where, s.bucket, err)
	case status == http.StatusNotFound || code == "NoSuchKey" || code == "NotFound":
		return fmt.Errorf("%s: %w", where, ErrNotFound)
	case status == http.StatusForbidden:
		return fmt.Errorf("objstore: %s: the object store refused the credentials (403 %s): %w",
			s.Describe(), code, err)
	}
	return fmt.Errorf("objstore: %s %s: %w", op, where, err)
}

// PutIfAbsent sends a body of at most one part in one PutObject, a larger
// one as a multipart upload.
func (s *s3Store) PutIfAbsent(ctx context.Context, key string, body io.ReaderAt, size int64) error {
	if err := checkKey(key); err != nil {
		return err
	}
	if size > s.partSize {
		return s.putMultipart(ctx, key, body, size)
	}
	_, err := s.client.PutObject(ctx, &s3.PutObjectInput{
		Bucket:        &s.bucket,
		Key:           aws.String(s.prefix + key),
		Body:          io.NewSectionReader(body, 0, size),
		ContentLength: aws.Int64(size),
		IfNoneMatch:   aws.String("*"),
		// SSE headers are sent on the requests that create an object; parts
		// and the completion carry none (S3 refuses them there).
		ServerSideEncryption: s.sse,
		SSEKMSKeyId:          s.sseKMSKeyID,
	})
	if err != nil {
		return s.fail("put", key, err)
	}
	return nil
}

// putMultipart uploads the parts one after the other and completes the
// upload with If-None-Match: *. On any failure, ErrExists included, it
// aborts the upload so that S3 frees its parts.
func (s *s3Store) putMultipart(ctx context.Context, key string, body io.ReaderAt, size int64) error {
	created, err := s.client.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{
		Bucket:               &s.bucket,
		Key:                  aws.String(s.prefix + key),
		ChecksumAlgorithm:    types.ChecksumAlgorithmCrc32,
		ServerSideEncryption: s.sse,
		SSEKMSKeyId:          s.sseKMSKeyID,
	})
	if err != nil {
		return s.fail("create multipart upload", key, err)
	}
	parts, err := s.uploadParts(ctx, key, created.UploadId, body, size)
	if err == nil {
		_, err = s.client.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{
			Bucket:          &s.bucket,
			Key:             aws.String(s.prefix + key),
			UploadId:        created.UploadId,
			MultipartUpload: &types.CompletedMultipartUpload{Parts: parts},
			IfNoneMatch:     aws.String("*"),
		})
	}
	if err != nil {
		s.abort(ctx, key, created.UploadId)
		return s.fail("multipart upload", key, err)
	}
	return nil
}

// uploadParts sends body in parts of partSize bytes (more when the body
// would need over maxParts parts), each with its CRC32, which S3 checks
// again at completion.
func (s *s3Store) uploadParts(ctx context.Context, key string, uploadID *string, body io.ReaderAt, size int64) ([]types.CompletedPart, error) {
	partSize := max(s.partSize, (size+maxParts-1)/maxParts)
	var parts []types.CompletedPart
	for off, number := int64(0), int32(1); off < size; off, number = off+partSize, number+1 {
		n := min(partSize, size-off)
		out, err := s.client.UploadPart(ctx, &s3.UploadPartInput{
			Bucket:            &s.bucket,
			Key:               aws.String(s.prefix + key),
			UploadId:          uploadID,
			PartNumber:        aws.Int32(number),
			Body:              io.NewSectionReader(body, off, n),
			ContentLength:     aws.Int64(n),
			ChecksumAlgorithm: types.ChecksumAlgorithmCrc32,
		})
		if err != nil {
			return nil, fmt.Errorf("part %d: %w", number, err)
		}
		parts = append(parts, types.CompletedPart{
			ETag: out.ETag, PartNumber: aws.Int32(number), ChecksumCRC32: out.ChecksumCRC32,
		})
	}
	return parts, nil
}

// abort abandons a multipart upload, even when ctx is done. A failed abort
// leaves parts that a bucket lifecycle rule (AbortIncompleteMultipartUpload)
// removes; they are never visible under the key.
func (s *s3Store) abort(ctx context.Context, key string, uploadID *string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), abortTimeout)
	defer cancel()
	s.client.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{
		Bucket: &s.bucket, Key: aws.String(s.prefix + key), UploadId: uploadID,
	})
}

func (s *s3Store) Get(ctx context.Context, key string) ([]byte, error) {
	return s.get(ctx, key, nil)
}

func (s *s3Store) GetRange(ctx context.Context, key string, off, n int64) ([]byte, error) {
	if err := checkRange(key, off, n); err != nil {
		return nil, err
	}
	if n == 0 {
		return []byte{}, nil
	}
	data, err := s.get(ctx, key, aws.String(fmt.Sprintf("bytes=%d-%d", off, off+n-1)))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) != n {
		return nil, shortRangeError(s.Describe()+"/"+key, off, n, int64(len(data)))
	}
	return data, nil
}

// get reads the object, or the given Range of it. A range starting at or
// beyond the object's end is S3's 416 InvalidRange.
func (s *s3Store) get(ctx context.Context, key string, byteRange *string) ([]byte, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{
		Bucket: &s.bucket, Key: aws.String(s.prefix + key), Range: byteRange,
	})
	if err != nil {
		return nil, s.fail("get", key, err)
	}
	defer out.Body.Close()
	data, err := io.ReadAll(out.Body)
	if err != nil {
		return nil, s.fail("get", key, err)
	}
	return data, nil
}

func (s *s3Store) Size(ctx context.Context, key string) (int64, error) {
	if err := checkKey(key); err != nil {
		return 0, err
	}
	out, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{
		Bucket: &s.bucket, Key: aws.String(s.prefix + key),
	})
	if err != nil {
		return 0, s.fail("head", key, err)
	}
	return aws.ToInt64(out.ContentLength), nil
}

// List pages through ListObjectsV2, which returns keys in UTF-8 binary
// order, that is lexicographic byte order.
func (s *s3Store) List(ctx context.Context, prefix string) ([]Object, error) {
	if err := checkPrefix(prefix); err != nil {
		return nil, err
	}
	input := &s3.ListObjectsV2Input{Bucket: &s.bucket, Prefix: aws.String(s.prefix + prefix)}
	if s.pageSize > 0 {
		input.MaxKeys = aws.Int32(s.pageSize)
	}
	var objects []Object
	for pages := s3.NewListObjectsV2Paginator(s.client, input); pages.HasMorePages(); {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, s.fail("list", prefix, err)
		}
		for _, o := range page.Contents {
			key := strings.TrimPrefix(aws.ToString(o.Key), s.prefix)
			objects = append(objects, Object{Key: key, Size: aws.ToInt64(o.Size)})
		}
	}
	return objects, nil
}
