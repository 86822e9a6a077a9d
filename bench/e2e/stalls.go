package main

import (
	"fmt"
	"runtime"
	"time"

	"orderlog/internal/fileutil"
)

// A stall watch measures how late a thread that sleeps stallNap at a time
// wakes up. Waking more than stallThreshold late means that for that long
// no core ran a thread that was ready: the machine's cores were busy, or
// the hypervisor did not run the machine at all (a VM over its CPU quota).
// An ack that overlaps a stall cannot be faster than the stall, so the
// half-rate rounds report them beside their latencies.
const (
	stallNap       = time.Millisecond
	stallThreshold = 3 * time.Millisecond
)

type stalls struct {
	count int
	total time.Duration
}

func (s stalls) String() string {
	return fmt.Sprintf("%d wake-ups over %s late (%.0f ms in all)", s.count, stallThreshold, ms(s.total))
}

type stallWatch struct {
	stop chan struct{}
	done chan stalls
}

func watchStalls() *stallWatch {
	w := &stallWatch{stop: make(chan struct{}), done: make(chan stalls, 1)}
	go func() {
		// A thread of its own, sleeping in nanosleep (on Linux): the Go
		// scheduler's timers wake in whole milliseconds when the process
		// is idle.
		runtime.LockOSThread()
		var seen stalls
		for {
			select {
			case <-w.stop:
				w.done <- seen
				return
			default:
			}
			start := time.Now()
			fileutil.SleepPrecisely(stallNap)
			if late := time.Since(start) - stallNap; late > stallThreshold {
				seen.count++
				seen.total += late
			}
		}
	}()
	return w
}

// Stop ends the watch and returns what it saw.
func (w *stallWatch) Stop() stalls {
	close(w.stop)
	return <-w.done
}
