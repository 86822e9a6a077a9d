package main

import (
	"flag"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"orderlog/internal/node"
	"orderlog/tiering/objstore"
)

// archiveFlags say where the log is archived as Parquet (tiering) and how.
type archiveFlags struct {
	url        string
	endpoint   string
	region     string
	fileBytes  byteSize
	fileAge    time.Duration
	hotWindow  time.Duration
	cacheBytes byteSize
	sse        string
	sseKMSKey  string
	plaintext  bool
}

// The S3 flags' help, the same for the node and the archive commands.
const (
	s3EndpointHelp = "S3-compatible endpoint URL for an s3:// archive (path-style); empty: AWS S3. Credentials come from the AWS chain (AWS_ACCESS_KEY_ID, AWS_PROFILE, ...)"
	s3RegionHelp   = "S3 region (default: AWS_REGION, the profile's, else us-east-1)"
)

// noArchive is the --archive value that turns the archive off in dev.
const noArchive = "none"

// register adds the flags; inDev says that no --archive means dev's
// default (devArchive), not none.
func (f *archiveFlags) register(fs *flag.FlagSet, inDev bool) {
	f.fileBytes, f.cacheBytes = 512<<20, 1<<30
	help := "archive the log as Parquet to file://PATH or s3://BUCKET/PREFIX; reads below the log start come from it"
	if inDev {
		help += " (default file://DATA/archive; \"" + noArchive + "\": no archive)"
	}
	fs.StringVar(&f.url, "archive", "", help)
	fs.StringVar(&f.endpoint, "s3-endpoint", "", s3EndpointHelp)
	fs.StringVar(&f.region, "s3-region", "", s3RegionHelp)
	fs.Var(&f.fileBytes, "archive-file-bytes", "cut an archive file once it holds this much (512MiB, or bytes)")
	fs.DurationVar(&f.fileAge, "archive-file-age", 10*time.Minute, "cut an archive file at the committed watermark once its first message is this old")
	fs.DurationVar(&f.hotWindow, "archive-hot-window", 4*time.Hour, "keep archived messages on the nodes' disks this long (--retention, if set, instead)")
	fs.Var(&f.cacheBytes, "archive-cache-bytes", "bound the local cache of archive blocks that reads below the log start fetch")
	fs.StringVar(&f.sse, "s3-sse", "none", "S3 server-side encryption of archive objects: none (the bucket's default), AES256 (SSE-S3) or aws:kms (SSE-KMS)")
	fs.StringVar(&f.sseKMSKey, "s3-sse-kms-key-id", "", "the KMS key for --s3-sse aws:kms (empty: the account's default key)")
	fs.BoolVar(&f.plaintext, "archive-plaintext", false,
		"write archive files in clear even with --encryption-key-file (for engines that cannot decrypt Parquet, e.g. Athena); encrypted files are still read")
}

// apply maps the flags onto cfg; cfg.EncryptionKeyFile must be set
// before (--archive-plaintext is refused without it). A flag that has no
// effect without an archive is refused, not ignored: an operator who asked
// for SSE must not get an unencrypted bucket write without knowing.
func (f *archiveFlags) apply(cfg *node.Config) error {
	if f.url == "" || f.url == noArchive {
		return f.refuseWithoutArchive()
	}
	if f.plaintext && cfg.EncryptionKeyFile == "" {
		return fmt.Errorf("--archive-plaintext needs --encryption-key-file (without it archive files are in clear anyway)")
	}
	if f.fileBytes <= 0 || f.fileAge <= 0 || f.hotWindow <= 0 {
		return fmt.Errorf("--archive-file-bytes, --archive-file-age and --archive-hot-window must be positive")
	}
	cfg.Archive = node.ArchiveConfig{URL: f.url, FileBytes: int64(f.fileBytes), FileAge: f.fileAge, HotWindow: f.hotWindow,
		CacheBytes: int64(f.cacheBytes)}
	cfg.Archive.S3.Endpoint, cfg.Archive.S3.Region = f.endpoint, f.region
	cfg.Archive.Plaintext = f.plaintext
	return f.applySSE(cfg)
}

// refuseWithoutArchive refuses the archive flags that mean nothing
// without an archive.
func (f *archiveFlags) refuseWithoutArchive() error {
	switch {
	case f.sse != "" && f.sse != "none":
		return fmt.Errorf("--s3-sse %s needs an s3:// --archive", f.sse)
	case f.sseKMSKey != "":
		return fmt.Errorf("--s3-sse-kms-key-id needs an s3:// --archive with --s3-sse %s", objstore.SSEKMS)
	case f.plaintext:
		return fmt.Errorf("--archive-plaintext needs an --archive")
	}
	return nil
}

// applySSE maps --s3-sse and --s3-sse-kms-key-id onto cfg's S3 options.
func (f *archiveFlags) applySSE(cfg *node.Config) error {
	sse := f.sse
	if sse == "none" {
		sse = ""
	}
	switch {
	case sse != "" && !strings.HasPrefix(f.url, "s3://"):
		return fmt.Errorf("--s3-sse %s: the archive %s is not s3://", f.sse, f.url)
	case sse != "" && sse != objstore.SSES3 && sse != objstore.SSEKMS:
		return fmt.Errorf("--s3-sse %q: want none, %s or %s", f.sse, objstore.SSES3, objstore.SSEKMS)
	case f.sseKMSKey != "" && sse != objstore.SSEKMS:
		return fmt.Errorf("--s3-sse-kms-key-id needs --s3-sse %s", objstore.SSEKMS)
	}
	cfg.Archive.S3.SSE, cfg.Archive.S3.SSEKMSKeyID = sse, f.sseKMSKey
	return nil
}

// devDefault sets dev's default archive, a directory in its data
// directory, when --archive was not given.
func (f *archiveFlags) devDefault(dataDir string) {
	if f.url == "" {
		f.url = devArchive(dataDir)
	}
}

func devArchive(dataDir string) string {
	abs, err := filepath.Abs(filepath.Join(dataDir, "archive"))
	if err != nil {
		return ""
	}
	return "file://" + abs
}
