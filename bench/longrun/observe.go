package main

import (
	"bufio"
	"io/fs"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// diskWatch samples the data directory's disk usage (as du counts it:
// allocated blocks) every interval while the bench runs and keeps the
// largest sample.
type diskWatch struct {
	dir  string
	stop chan struct{}
	done chan struct{}
	mu   struct {
		sync.Mutex
		max, last int64
	}
}

func watchDisk(dir string, interval time.Duration) *diskWatch {
	w := &diskWatch{dir: dir, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		ticker := time.NewTicker(interval)
		defer ticker.Stop()
		for {
			w.sample()
			select {
			case <-w.stop:
				return
			case <-ticker.C:
			}
		}
	}()
	return w
}

func (w *diskWatch) sample() {
	used := duBytes(w.dir)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.mu.last, w.mu.max = used, max(w.mu.max, used)
}

// current returns the latest sample and the largest one so far.
func (w *diskWatch) current() (last, largest int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.mu.last, w.mu.max
}

func (w *diskWatch) Stop() {
	close(w.stop)
	<-w.done
}

// duBytes is what `du -s` reports for dir, in bytes. Files that vanish
// while it walks (retention deleting a segment) are skipped.
func duBytes(dir string) int64 {
	var total int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			total += st.Blocks * 512
		}
		return nil
	})
	return total
}

// scrapeMetrics reads the unlabelled samples of the named metrics from a
// Prometheus /metrics page; names it does not find are left out.
func scrapeMetrics(httpAddr string, names ...string) map[string]float64 {
	out := map[string]float64{}
	httpClient := &http.Client{Timeout: 5 * time.Second}
	resp, err := httpClient.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		return out
	}
	defer resp.Body.Close()
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	scanner := bufio.NewScanner(resp.Body)
	scanner.Buffer(make([]byte, 1<<20), 1<<20)
	for scanner.Scan() {
		name, value, ok := strings.Cut(scanner.Text(), " ")
		if !ok || !want[name] {
			continue
		}
		if v, err := strconv.ParseFloat(strings.TrimSpace(value), 64); err == nil {
			out[name] = v
		}
	}
	return out
}

// devMetrics are the dev's metrics printed at each size: where the log
// starts, what retention deleted, and the state the checkpoints bound.
var devMetrics = []string{
	"orderlog_committed_watermark",
	"orderlog_log_start",
	"orderlog_ledgers",
	"orderlog_store_ledgers",
	"orderlog_retention_deleted_ledgers_total",
	"orderlog_retention_deleted_bytes_total",
	"orderlog_wal_journal_bytes",
	"orderlog_commit_map_resident_segments",
	"go_memstats_heap_inuse_bytes",
}

// readerMetrics are the fresh reader's: the commit map it holds, its
// heap.
var readerMetrics = []string{
	"orderlog_committed_watermark",
	"orderlog_commit_map_resident_segments",
	"go_memstats_heap_inuse_bytes",
}

// metricsLine prints the samples found, in the order asked.
func metricsLine(values map[string]float64, names []string) string {
	var parts []string
	for _, n := range names {
		if v, ok := values[n]; ok {
			parts = append(parts, strings.TrimPrefix(n, "orderlog_")+"="+strconv.FormatFloat(v, 'f', -1, 64))
		}
	}
	if len(parts) == 0 {
		return "(none of the metrics found)"
	}
	return strings.Join(parts, " ")
}
