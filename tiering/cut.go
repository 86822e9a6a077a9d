package tiering

import "time"

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
// end. It does no I/O and reads no clock.
type cutter struct {
	policy      CutPolicy
	first       uint64 // the file's first offset
	rows        int64
	bytes       int64
	firstIngest time.Time // the first row's, zero while none
}

// cutBefore reports whether the file must end before a message ingested
// at ingest (a later UTC day than its first row's).
func (c *cutter) cutBefore(ingest time.Time) bool {
	return c.rows > 0 && utcDay(ingest).After(utcDay(c.firstIngest))
}

// add counts a message of size bytes appended to the file, and reports
// whether the file is full and ends after it.
func (c *cutter) add(ingest time.Time, size int) (full bool) {
	if c.rows == 0 {
		c.firstIngest = ingest
	}
	c.rows++
	c.bytes += int64(size)
	return c.bytes >= c.policy.FileBytes
}

// cutAtCommitted reports whether the file, having read everything
// committed, ends there at now: its first message is old enough, or it
// holds no message at all (only holes, which wait for nothing).
func (c *cutter) cutAtCommitted(now time.Time) bool {
	return c.rows == 0 || now.Sub(c.firstIngest) >= c.policy.FileAge
}

func utcDay(t time.Time) time.Time {
	y, m, d := t.UTC().Date()
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
}
