package wal

import (
	"fmt"
	"strings"
	"time"

	"orderlog/ingest/wal/walfs"
)

// Config configures a Store. The zero value of every field but Dir is a
// safe default.
type Config struct {
	// Dir holds the journal, index checkpoints and the cookie.
	Dir string
	// FS is the filesystem; nil means the operating system's.
	FS walfs.FS
	// SyncInterval 0 (policy "always", the default) makes every append wait
	// for the fdatasync that covers it. A positive value (policy
	// "interval=<d>") acknowledges appends after the write and fdatasyncs at
	// most every SyncInterval: weaker, acknowledged data can be lost by a
	// machine crash, and an unclean restart starts a new incarnation.
	// Fences, closes and deletes are always fsynced before they return.
	SyncInterval time.Duration
	// SegmentSize is the size at which the journal rolls to a new segment
	// file. Default 64 MiB; at most 1 GiB.
	SegmentSize int64
	// ExpectedIncarnation, if not 0, is the incarnation the store is
	// registered with; a cookie that differs starts a new incarnation.
	ExpectedIncarnation uint64
	// MaxPendingBytes bounds the bytes waiting for the next write; appends
	// block beyond it. Default 32 MiB.
	MaxPendingBytes int
	// Now is the clock used for new incarnation numbers; nil means time.Now.
	Now func() time.Time
}

const (
	defaultSegmentSize = 64 << 20
	maxSegmentSize     = 1 << 30
)

// Validate fills defaults and rejects nonsense.
func (c *Config) Validate() error {
	if c.Dir == "" {
		return fmt.Errorf("wal: config: Dir is required")
	}
	if c.FS == nil {
		c.FS = walfs.OS{}
	}
	if c.SyncInterval < 0 {
		return fmt.Errorf("wal: config: negative SyncInterval")
	}
	if c.SegmentSize == 0 {
		c.SegmentSize = defaultSegmentSize
	}
	if c.SegmentSize < segmentHeaderSize+RecordHeaderSize || c.SegmentSize > maxSegmentSize {
		return fmt.Errorf("wal: config: SegmentSize %d out of range", c.SegmentSize)
	}
	if c.MaxPendingBytes == 0 {
		c.MaxPendingBytes = 32 << 20
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return nil
}

// ParsePolicy parses an fsync policy: "always" or "interval=<duration>",
// returning the SyncInterval it stands for.
func ParsePolicy(s string) (time.Duration, error) {
	if s == "always" || s == "" {
		return 0, nil
	}
	if v, ok := strings.CutPrefix(s, "interval="); ok {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return 0, fmt.Errorf("wal: bad fsync interval %q", v)
		}
		return d, nil
	}
	return 0, fmt.Errorf("wal: unknown fsync policy %q (want always or interval=<d>)", s)
}
