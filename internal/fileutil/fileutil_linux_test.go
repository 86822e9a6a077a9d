package fileutil

import (
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

var errNotSupported = unix.EOPNOTSUPP

func allocatedBytes(t *testing.T, f *os.File) (int64, bool) {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512, true
}

// On Linux, SleepPrecisely is nanosleep: well under a millisecond late for
// a 150 µs sleep, where time.Sleep wakes at the next whole millisecond of an
// idle runtime. The best of several tries, so that one descheduling does not
// fail the test.
func TestSleepPreciselyIsSubMillisecondOnLinux(t *testing.T) {
	const d = 150 * time.Microsecond
	best := time.Hour
	for range 20 {
		start := time.Now()
		SleepPrecisely(d)
		best = min(best, time.Since(start))
	}
	if best < d || best > 900*time.Microsecond {
		t.Fatalf("best of 20 SleepPrecisely(%s): %s", d, best)
	}
}
