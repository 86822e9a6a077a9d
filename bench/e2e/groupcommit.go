package main

import (
	"os"
	"sort"
	"sync"
	"time"

	"orderlog/internal/fileutil"
)

// idealGroupCommit measures the ack latency of an ideal log on the same
// disk: frames of frameBytes arrive at rate frames/s, evenly spread; one
// committer writes everything that arrived since its last round and
// fdatasyncs it, then "acknowledges" those frames. Nothing else happens, so
// its latency is the floor any fsync-before-ack log has on this disk at
// this rate, measured minutes (not hours) from the e2e figure it is
// compared with. It returns the per-frame latencies.
//
// Each call writes a new file and leaves it for the caller's final cleanup:
// on a file system mounted with `discard` (as here), deleting a GiB-sized
// file sends TRIMs that stall the disk's fsyncs for tens of milliseconds,
// which would land on whatever is measured next.
func idealGroupCommit(dir string, frameBytes int, rate float64, duration time.Duration) []time.Duration {
	check(os.MkdirAll(dir, 0o755))
	f, err := os.CreateTemp(dir, "groupcommit-*.dat")
	check(err)
	defer f.Close()

	var mu sync.Mutex
	cond := sync.NewCond(&mu)
	var arrived []time.Time // frames waiting for the next commit round
	done := false
	go func() {
		interval := time.Duration(float64(time.Second) / rate)
		next := time.Now()
		end := next.Add(duration)
		for next.Before(end) {
			time.Sleep(time.Until(next))
			mu.Lock()
			arrived = append(arrived, time.Now())
			cond.Signal()
			mu.Unlock()
			next = next.Add(interval)
		}
		mu.Lock()
		done = true
		cond.Signal()
		mu.Unlock()
	}()

	frame := make([]byte, frameBytes)
	buf := make([]byte, 0, 16<<20)
	var latencies []time.Duration
	for {
		mu.Lock()
		for len(arrived) == 0 && !done {
			cond.Wait()
		}
		if len(arrived) == 0 {
			mu.Unlock()
			break
		}
		round := arrived
		arrived = nil
		mu.Unlock()
		buf = buf[:0]
		for range round {
			buf = append(buf, frame...)
		}
		_, err := f.Write(buf)
		check(err)
		check(fileutil.Fdatasync(f)) // as the WAL store syncs
		now := time.Now()
		for _, at := range round {
			latencies = append(latencies, now.Sub(at))
		}
	}
	return latencies
}

func percentile(latencies []time.Duration, p float64) time.Duration {
	if len(latencies) == 0 {
		return 0
	}
	sorted := append([]time.Duration(nil), latencies...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	return sorted[int(p*float64(len(sorted)-1))]
}
