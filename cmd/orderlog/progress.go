package main

import (
	"fmt"
	"os"
	"time"
)

// progress prints a running count to a terminal (and nothing when the
// output is a file or pipe, so scripts get clean output).
type progress struct {
	out     *os.File
	enabled bool
	count   int
	start   time.Time
	last    time.Time
}

func newProgress(out *os.File) *progress {
	info, err := out.Stat()
	enabled := err == nil && info.Mode()&os.ModeCharDevice != 0
	return &progress{out: out, enabled: enabled, start: time.Now()}
}

func (p *progress) add(n int) {
	p.count += n
	if !p.enabled || time.Since(p.last) < 200*time.Millisecond {
		return
	}
	p.last = time.Now()
	rate := float64(p.count) / time.Since(p.start).Seconds()
	fmt.Fprintf(p.out, "\rsent %d messages (%.0f msg/s)", p.count, rate)
}

func (p *progress) done() {
	if p.enabled && p.count > 0 {
		fmt.Fprintln(p.out)
	}
}
