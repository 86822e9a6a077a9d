package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
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

// processCPU is the user and system CPU time of process pid so far, all its
// threads, from /proc/PID/stat (Linux; clock ticks of 1/100 s, USER_HZ).
func processCPU(pid int) (time.Duration, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command's closing parenthesis, from the third
	// (state): utime and stime are the 14th and 15th fields.
	_, rest, ok := strings.Cut(string(raw), ") ")
	fields := strings.Fields(rest)
	if !ok || len(fields) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected %q", pid, raw)
	}
	var ticks int64
	for _, f := range fields[11:13] {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond, nil
}
