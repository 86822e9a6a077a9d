package wal

import (
	"fmt"
	"strings"
	"time"

	"orderlog/ingest/wal/walfs"
	"orderlog/internal/event"
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
	// SyncDelay (policy "always,delay=<d>", default 0) makes the commit loop
	// wait until d has passed since the last fdatasync before it writes the
	// next batch, so that more appends share one flush (group commit's
	// commit delay). Appends still wait for the fdatasync that covers them;
	// under continuous load each waits up to d longer, a lone append after a
	// quiet d waits for nothing, and neither does a batch that already holds
	// 512 KiB (the peak rate's batches are larger). For machines that pay
	// per flush: on a VM with a CPU quota the hypervisor's work for each
	// flush counts against it (docs/operations.md).
	SyncDelay time.Duration
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
	// SlowSync is the fdatasync duration from which Events.SlowSync is told
	// of each one. Default DefaultSlowSync; negative: never.
	SlowSync time.Duration
	// Events is told of slow fsyncs and of the disk filling up.
	Events event.Listener
	// Disk sets the marks at which the store's disk counts as full
	// (disk.go).
	Disk DiskLimits
	// Keys, if not nil, encrypt entry payloads at rest with AES-256-GCM
	// under the current key (crypt.go); every key id the journal holds
	// records under must be among them, or Open fails with a *KeyError.
	// Nil: payloads are written in clear, and a journal holding encrypted
	// records does not open.
	Keys *Keys
}

// DefaultSlowSync is the default Config.SlowSync: an fdatasync that long
// holds every append behind it (they all wait for it), so each is worth a
// line in the log.
const DefaultSlowSync = time.Second

const (
	maxSyncDelay       = 100 * time.Millisecond
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
	if c.SyncDelay < 0 || c.SyncDelay > maxSyncDelay {
		return fmt.Errorf("wal: config: SyncDelay %s out of range [0, %s]", c.SyncDelay, maxSyncDelay)
	}
	if c.SyncDelay > 0 && c.SyncInterval > 0 {
		return fmt.Errorf("wal: config: SyncDelay applies to policy always, not to interval")
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
	if c.SlowSync == 0 {
		c.SlowSync = DefaultSlowSync
	}
	c.Events.EnsureDefaults()
	return c.Disk.Validate()
}

// Policy is a parsed fsync policy.
type Policy struct {
	SyncInterval time.Duration // see Config.SyncInterval
	SyncDelay    time.Duration // see Config.SyncDelay
}

// DefaultPolicy is the policy a node runs with when none is given. Every
// ack still waits for its fdatasync; the commit loop waits 150 µs after each
// one so that more messages share the next. On the 2-vCPU development VM,
// whose CPU quota the hypervisor's work for each flush counts against, that
// lowered the half-rate p99 in 3 of 4 alternating pairs of whole
// bench/e2e runs and evened the fourth (docs/operations.md). The store's
// own zero Config has no delay.
const DefaultPolicy = "always,delay=150us"

// ParsePolicy parses an fsync policy: "always", "always,delay=<duration>"
// or "interval=<duration>"; "" is DefaultPolicy.
func ParsePolicy(s string) (Policy, error) {
	if s == "" {
		s = DefaultPolicy
	}
	if s == "always" {
		return Policy{}, nil
	}
	if v, ok := strings.CutPrefix(s, "always,delay="); ok {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 || d > maxSyncDelay {
			return Policy{}, fmt.Errorf("wal: bad fsync delay %q (want a duration up to %s)", v, maxSyncDelay)
		}
		return Policy{SyncDelay: d}, nil
	}
	if v, ok := strings.CutPrefix(s, "interval="); ok {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return Policy{}, fmt.Errorf("wal: bad fsync interval %q", v)
		}
		return Policy{SyncInterval: d}, nil
	}
	return Policy{}, fmt.Errorf("wal: unknown fsync policy %q (want always, always,delay=<d> or interval=<d>)", s)
}
