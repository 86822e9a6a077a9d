package main

import (
	"time"

	"golang.org/x/sys/unix"
)

// CPU time, a figure beside the rates: the machine is shared, and another
// load takes CPU from a timed writer or the tiering dev and stretches its
// wall time, while its CPU time per row moves much less.

// threadCPU is the CPU time of the calling OS thread so far; the caller
// holds its thread (runtime.LockOSThread).
func threadCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}
