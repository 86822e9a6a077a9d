package main

import (
	"flag"
	"fmt"
	"path/filepath"
	"time"

	"orderlog/internal/node"
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
}

// apply maps the flags onto cfg.
func (f *archiveFlags) apply(cfg *node.Config) error {
	if f.url == "" || f.url == noArchive {
		return nil
	}
	if f.fileBytes <= 0 || f.fileAge <= 0 || f.hotWindow <= 0 {
		return fmt.Errorf("--archive-file-bytes, --archive-file-age and --archive-hot-window must be positive")
	}
	cfg.Archive = node.ArchiveConfig{URL: f.url, FileBytes: int64(f.fileBytes), FileAge: f.fileAge, HotWindow: f.hotWindow,
		CacheBytes: int64(f.cacheBytes)}
	cfg.Archive.S3.Endpoint, cfg.Archive.S3.Region = f.endpoint, f.region
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
