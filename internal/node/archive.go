package node

import (
	"context"
	"os"
	"path/filepath"
	"time"

	"orderlog/proto/orderlogpb"
	"orderlog/reader"
	"orderlog/schema"
	"orderlog/tiering"
	"orderlog/tiering/objstore"
	"orderlog/tiering/parquetfile"
)

// ArchiveConfig is where and how the log is archived (DESIGN.md §8,
// tiering). Every process with a reader runs a tiering worker, one of
// them elected, and reads below the log start from the archive.
type ArchiveConfig struct {
	// URL is "file://PATH" or "s3://BUCKET/PREFIX"; empty: no archive.
	URL string
	// S3 is the object store's endpoint and region (credentials come
	// from the AWS chain).
	S3 objstore.Options
	// FileBytes and FileAge cut files (defaults 512 MiB and 10 min).
	FileBytes int64
	FileAge   time.Duration
	// HotWindow keeps archived messages on the nodes' disks this long
	// before retention deletes their ledgers (default 4 h); --retention,
	// if set, is the hot window instead.
	HotWindow time.Duration
	// CacheBytes bounds the readers' block cache of archive objects
	// (default 1 GiB).
	CacheBytes int64
	// Interval between the tiering worker's passes (default 1 s).
	Interval time.Duration
	// Plaintext writes archive files in clear even when the node has an
	// encryption key file (for query engines that cannot decrypt Parquet,
	// such as Athena; an s3:// archive can still ask for server-side
	// encryption, S3.SSE). Files already encrypted are still read.
	Plaintext bool
}

// defaultHotWindow keeps archived messages on the disks 4 h.
const defaultHotWindow = 4 * time.Hour

func (c *ArchiveConfig) withDefaults() {
	if c.FileBytes <= 0 {
		c.FileBytes = 512 << 20
	}
	if c.FileAge <= 0 {
		c.FileAge = 10 * time.Minute
	}
	if c.HotWindow <= 0 {
		c.HotWindow = defaultHotWindow
	}
}

// startArchive opens the archive's store, makes the reader serve below
// the log start from it, and runs a tiering worker.
func (s *Server) startArchive(ctx context.Context) error {
	if s.cfg.Archive.URL == "" || s.reader == nil {
		return nil
	}
	s.cfg.Archive.withDefaults()
	store, err := objstore.Open(ctx, s.cfg.Archive.URL, s.cfg.Archive.S3)
	if err != nil {
		return err
	}
	dir := s.cfg.DataDir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "orderlog-archive-"); err != nil {
			return err
		}
	}
	keys, writerKeys, err := s.archiveKeys()
	if err != nil {
		return err
	}
	archive, err := tiering.NewArchiveReader(store, tiering.ReaderOptions{CacheDir: filepath.Join(dir, "archive-cache"),
		CacheBytes: s.cfg.Archive.CacheBytes, Logger: s.logger, Keys: keys})
	if err != nil {
		return err
	}
	go archive.Follow(ctx, s.cli)
	s.reader.SetArchive(archive)
	s.archive = archive
	metrics := tiering.NewMetrics(nil)
	s.tieringMetrics = metrics
	name := s.cfg.NodeName
	if s.store != nil {
		name += "/" + s.store.StoreID() // as retention's: unique even if two nodes share a name
	}
	w, err := tiering.New(tiering.Config{Etcd: s.cli, Store: store, Log: rawLog{s.reader}, LogStart: s.reader.LogStart,
		Name: name, Cut: tiering.CutPolicy{FileBytes: s.cfg.Archive.FileBytes, FileAge: s.cfg.Archive.FileAge},
		Writer: parquetfile.WriterOptions{Keys: writerKeys}, Keys: keys, TempDir: filepath.Join(dir, "tiering"), Interval: s.cfg.Archive.Interval,
		Schemas: tiering.NewSchemaResolver(schema.New(s.cli)), Logger: s.logger, Metrics: metrics})
	if err != nil {
		return err
	}
	go w.Run(ctx)
	return nil
}

// archiveKeys are the archive keys derived from the node's encryption key
// file (docs/security.md): those reads decrypt with, and those new files
// are encrypted under (nil with Archive.Plaintext). Both nil without a
// key file.
func (s *Server) archiveKeys() (read, write *parquetfile.Keys, err error) {
	if s.cfg.EncryptionKeyFile == "" {
		return nil, nil, nil
	}
	if read, err = tiering.LoadArchiveKeys(s.cfg.EncryptionKeyFile); err != nil {
		return nil, nil, err
	}
	if s.cfg.Archive.Plaintext {
		return read, nil, nil
	}
	return read, read, nil
}

// archivedWatermark is T, for retention (which never moves the log start
// past it); false before the archive has a head.
func (s *Server) archivedWatermark(ctx context.Context) (uint64, bool, error) {
	head, err := tiering.ReadHead(ctx, s.cli)
	if err != nil || head.ModRevision == 0 {
		return 0, false, err
	}
	return head.T, true, nil
}

// rawLog reads the committed log for the tiering worker: every message,
// none hidden by its topic's retention.
type rawLog struct{ r *reader.Reader }

func (l rawLog) Committed() (uint64, bool) {
	epoch, committed := l.r.Commits().Committed()
	return committed, epoch != 0
}

func (l rawLog) ReadRaw(ctx context.Context, from uint64, limit int) (*orderlogpb.ReadResponse, error) {
	return l.r.ReadPage(ctx, from, limit, reader.Filter{IncludeHidden: true})
}
