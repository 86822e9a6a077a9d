package main

import (
	"flag"
	"fmt"
	"strconv"
	"strings"

	"orderlog/ingest/wal"
)

// diskHighWater is the --disk-high-water flag of every command that runs a
// WAL store (dev, node, ingest): the used share of the WAL's file system
// from which the node refuses new messages with DISK_FULL, as a fraction
// (0.9) or a percentage (90%, or 90). node.Config.Validate checks it and
// derives the low-water and hard marks.
type diskHighWater struct{ fraction *float64 }

func registerDiskFlag(fs *flag.FlagSet, limits *wal.DiskLimits) {
	limits.HighWater = wal.DefaultDiskHighWater
	fs.Var(diskHighWater{&limits.HighWater}, "disk-high-water",
		"used share of the WAL's disk (0.9 or 90%) from which new messages are refused with DISK_FULL; they are accepted again 5 points below it")
}

func (f diskHighWater) String() string {
	if f.fraction == nil {
		return ""
	}
	return strconv.FormatFloat(*f.fraction, 'g', -1, 64)
}

func (f diskHighWater) Set(s string) error {
	v, err := parseDiskShare(s)
	if err != nil {
		return err
	}
	*f.fraction = v
	return nil
}

// parseDiskShare reads "0.9", "90%" or "90" as 0.9: a value above 1
// without a sign is a percentage (no disk is 1 % full by design).
func parseDiskShare(s string) (float64, error) {
	number, percent := strings.CutSuffix(strings.TrimSpace(s), "%")
	number = strings.TrimSpace(number)
	v, err := strconv.ParseFloat(number, 64)
	if err != nil {
		return 0, fmt.Errorf("want a fraction (0.9) or a percentage (90%%): %q", s)
	}
	if percent || v > 1 {
		v /= 100
	}
	if v <= 0 || v > 1 {
		return 0, fmt.Errorf("%q is not within (0, 100%%]", s)
	}
	return v, nil
}
