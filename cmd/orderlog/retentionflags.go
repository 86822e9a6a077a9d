package main

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"orderlog/ingest"
	"orderlog/internal/node"
)

// retentionFlags bound what a node keeps (issue "bounded state"): how
// large or old an open ledger grows before it is rolled, how long an idle
// producer is remembered, and how much of the log is kept.
type retentionFlags struct {
	rollBytes      byteSize
	rollAge        time.Duration
	producerExpiry time.Duration
	age            time.Duration
	bytes          byteSize
	interval       time.Duration
	grace          time.Duration
	// The sequencer's commit-log checkpoints (they roll its commit ledger,
	// so that WAL segments it held can be freed).
	checkpointRecords  int
	checkpointInterval time.Duration
}

func (f *retentionFlags) register(fs *flag.FlagSet) {
	f.rollBytes = ingest.DefaultRollBytes
	fs.Var(&f.rollBytes, "ledger-roll-bytes", "roll the open ledger once it holds this many bytes (1GiB, 64MiB, or bytes); a rolled ledger can be deleted by retention")
	fs.DurationVar(&f.rollAge, "ledger-roll-age", ingest.DefaultRollAge, "roll the open ledger once it is this old")
	fs.DurationVar(&f.producerExpiry, "producer-expiry", ingest.DefaultProducerExpiry,
		"forget a producer idle this long; its next message is refused with PRODUCER_EXPIRED (InitProducer starts it over)")
	fs.DurationVar(&f.age, "retention", 0, "delete messages older than this (0: keep them); reads below the log start answer OFFSET_OUT_OF_RANGE")
	fs.Var(&f.bytes, "retention-bytes", "delete the oldest messages while the log holds more than this (one copy; 0: no limit)")
	fs.DurationVar(&f.interval, "retention-check", time.Second, "how often retention looks for messages to delete")
	fs.DurationVar(&f.grace, "retention-grace", time.Second, "delete a ledger only once the log start passed it and it was closed at least this long ago")
	fs.IntVar(&f.checkpointRecords, "checkpoint-records", 100_000, "write a commit-log checkpoint after this many commit records (negative: never)")
	fs.DurationVar(&f.checkpointInterval, "checkpoint-interval", 10*time.Second,
		"write a commit-log checkpoint at least this often while records come; each frees the WAL segments written before it that retention emptied")
}

// apply maps the flags onto cfg.
func (f *retentionFlags) apply(cfg *node.Config) {
	cfg.Ingest.RollBytes, cfg.Ingest.RollAge, cfg.Ingest.ProducerExpiry = int64(f.rollBytes), f.rollAge, f.producerExpiry
	cfg.Retention.Policy.Age, cfg.Retention.Policy.Bytes, cfg.Retention.Interval = f.age, int64(f.bytes), f.interval
	cfg.Retention.DeleteGrace = f.grace
	if f.grace == 0 {
		cfg.Retention.DeleteGrace = -1 // none
	}
	cfg.Checkpoint.Records, cfg.Checkpoint.Interval = f.checkpointRecords, f.checkpointInterval
}

// byteSize is a flag holding a byte count: a plain number, or one with a
// KiB, MiB, GiB or TiB (or KB, MB, GB, TB) suffix.
type byteSize int64

func (b *byteSize) String() string { return strconv.FormatInt(int64(*b), 10) }

func (b *byteSize) Set(s string) error {
	v, err := parseByteSize(s)
	if err != nil {
		return err
	}
	*b = byteSize(v)
	return nil
}

var byteUnits = []struct {
	suffix string
	scale  int64
}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1}}

func parseByteSize(s string) (int64, error) {
	text := strings.TrimSpace(s)
	scale := int64(1)
	for _, u := range byteUnits {
		if number, ok := strings.CutSuffix(text, u.suffix); ok {
			text, scale = strings.TrimSpace(number), u.scale
			break
		}
	}
	v, err := strconv.ParseFloat(text, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("want a byte count such as 1GiB, 512MiB or 1048576: %q", s)
	}
	return int64(v * float64(scale)), nil
}
