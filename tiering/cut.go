package tiering

import (
	"math"
	"time"
)

// CutPolicy says where a file ends (docs/design.md §8): before the first
// message of a later UTC day than the file's first, once it holds
// FileBytes, or, at the committed watermark, once its first message is
// FileAge old. Published files are never merged, so none is cut smaller
// for any other reason.
type CutPolicy struct {
	FileBytes int64
	FileAge   time.Duration
}

// cutter follows one file's messages as they are appended and decides its
// end. It does no I/O and reads no clock. Ingest times are microseconds
// since the Unix epoch (StoredMessage.ingest_time_us).
type cutter struct {
	policy      CutPolicy
	first       uint64 // the file's first offset
	rows        int64
	bytes       int64
	firstIngest int64 // the first row's ingest time, 0 while none
	// nextDay is the start of the UTC day after the first row's: a row
	// ingested at or after it belongs to a later day.
	nextDay int64
}

// cutBefore reports whether the file must end before a message ingested
// at ingest (a later UTC day than its first row's). A row of an earlier
// day than the first row's does not end the file (ingest nodes' clocks
// differ; offsets are not in ingest-time order).
func (c *cutter) cutBefore(ingest int64) bool {
	return c.rows > 0 && ingest >= c.nextDay
}

// add counts a message of size bytes ingested at ingest appended to the
// file, and reports whether the file is full and ends after it.
func (c *cutter) add(ingest int64, size int) (full bool) {
	if c.rows == 0 {
		c.firstIngest = ingest
		c.nextDay = nextUTCDay(ingest)
	}
	c.rows++
	c.bytes += int64(size)
	return c.bytes >= c.policy.FileBytes
}

// cutAtCommitted reports whether the file, having read everything
// committed, ends there at now: its first message is old enough, or it
// holds no message at all (only holes, which wait for nothing).
func (c *cutter) cutAtCommitted(now time.Time) bool {
	return c.rows == 0 || now.Sub(time.UnixMicro(c.firstIngest)) >= c.policy.FileAge
}

const microsPerDay = int64(24 * time.Hour / time.Microsecond)

// nextUTCDay is the start of the UTC day after the one holding the
// instant micros (Unix time has no leap seconds: its days are UTC days),
// or math.MaxInt64 when that is beyond int64.
func nextUTCDay(micros int64) int64 {
	day := micros / microsPerDay
	if micros%microsPerDay < 0 {
		day-- // floor, for instants before 1970
	}
	if day >= math.MaxInt64/microsPerDay {
		return math.MaxInt64
	}
	return (day + 1) * microsPerDay
}
