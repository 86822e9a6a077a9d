// Package proccpu reads the CPU time processes have used, for benchmarks
// that report CPU per message beside rates: on a shared machine the CPU a
// message costs moves far less than the rate it gets.
package proccpu

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clockTicks is USER_HZ, the unit of /proc/PID/stat's CPU times: 100 on
// every Linux architecture Go supports (the kernel converts to it).
const clockTicks = 100

// Process is the user + system CPU time process pid has used so far, all
// its threads, from /proc/PID/stat (Linux only; 10 ms resolution).
func Process(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces and parentheses: count
	// from after its last ')'. utime and stime are fields 14 and 15.
	s := string(data)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields after the name", pid, len(fields))
	}
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: utime %q stime %q", pid, fields[11], fields[12])
	}
	return time.Duration(utime+stime) * time.Second / clockTicks, nil
}

// Self is the user + system CPU time this process has used so far.
func Self() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
