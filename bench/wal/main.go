// Command wal benchmarks the WAL store against the raw disk in the same run
// and directory (`make bench-wal`):
//
//  1. store throughput: 1 KiB entries from 64 concurrent appenders, fsync
//     policy "always";
//  2. raw throughput: sequential write + fdatasync of the batch size the
//     store achieved, printed as wal_vs_raw_ratio (goal >= 0.8);
//  3. raw latency of write 1 KiB + fdatasync, and the store's append
//     latency at half its maximum throughput (goal p99 <= 3x raw);
//  4. the time to open a store holding -open-gib GiB with a torn tail.
package main

import (
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"orderlog/ingest/wal"
	"orderlog/ingest/wal/walfs"
	"orderlog/internal/fileutil"
)

var encrypt = flag.Bool("encrypt", false, "encrypt entry payloads (AES-256-GCM, a fixed key) in the store's phases")

// benchKeys are the store's keys with -encrypt, nil otherwise.
var benchKeys *wal.Keys

var cold = flag.Bool("cold", true, "evict the store's files from the page cache before timing Open")

var cpuProfile = flag.String("cpuprofile", "", "write a CPU profile of the timed Open to this file")

func main() {
	dirFlag := flag.String("dir", "", "directory for the data (default: a new temporary directory, removed afterwards)")
	duration := flag.Duration("duration", 2*time.Second, "length of each throughput phase")
	latencyDuration := flag.Duration("latency-duration", 5*time.Second, "length of each latency measurement")
	appenders := flag.Int("appenders", 64, "concurrent appenders")
	entrySize := flag.Int("entry", 1024, "entry payload size in bytes")
	rounds := flag.Int("rounds", 6, "alternating store/raw throughput rounds")
	openGiB := flag.Float64("open-gib", 1, "GiB of 1 KiB entries to write for the open-time measurement (0 skips it)")
	fillDir := flag.String("fill-dir", "", "internal: fill this store and exit without closing it")
	flag.Parse()
	if *encrypt {
		var err error // a fixed key: the -fill-dir process must have the same
		benchKeys, err = wal.ParseKeys([]byte("1 " + strings.Repeat("42", 32)))
		check(err)
	}
	if *fillDir != "" {
		fillAndExit(*fillDir, *openGiB)
	}

	dir := *dirFlag
	if dir == "" {
		var err error
		dir, err = os.MkdirTemp("", "walbench")
		check(err)
		tempDir = dir
		defer os.RemoveAll(dir)
	}
	fmt.Printf("dir=%s duration=%s appenders=%d entry=%dB encrypt=%v\n", dir, *duration, *appenders, *entrySize, *encrypt)

	// The machine is shared and its disk speed drifts: alternate short
	// store and raw phases, swapping which goes first every round, and
	// report the median ratio. Each raw phase writes the batch size the
	// store achieved (in odd rounds, the previous round's).
	var ratios, rates []float64
	batch := 32 * (*entrySize + wal.RecordHeaderSize)
	for round := range *rounds {
		var tput throughput
		var raw rawResult
		if round%2 == 0 {
			tput = storeThroughput(filepath.Join(dir, fmt.Sprintf("tput%d", round)), *appenders, *entrySize, *duration)
			batch = int(tput.batchBytes)
			raw = rawThroughput(filepath.Join(dir, fmt.Sprintf("raw-tput%d", round)), batch, *duration)
		} else {
			raw = rawThroughput(filepath.Join(dir, fmt.Sprintf("raw-tput%d", round)), batch, *duration)
			tput = storeThroughput(filepath.Join(dir, fmt.Sprintf("tput%d", round)), *appenders, *entrySize, *duration)
		}
		fmt.Printf("round %d store: %.0f entries/s, %.1f MB/s payload, %.1f MB/s journal, %.0f fdatasyncs/s, avg batch %.0f B (%.1f entries)\n",
			round, tput.entriesPerSec, tput.payloadMBps, tput.journalMBps, tput.batchesPerSec, tput.batchBytes, tput.batchBytes/float64(*entrySize+wal.RecordHeaderSize))
		fmt.Printf("round %d raw: write %d B + fdatasync: %.1f MB/s, %.0f fdatasyncs/s; ratio %.2f (journal bytes %.2f)\n",
			round, batch, raw.mbps, raw.syncsPerSec, tput.payloadMBps/raw.mbps, tput.journalMBps/raw.mbps)
		ratios = append(ratios, tput.payloadMBps/raw.mbps)
		rates = append(rates, tput.entriesPerSec)
	}
	fmt.Printf("wal_vs_raw_ratio=%.2f (median of %d rounds; store payload bytes/s over raw bytes/s at the store's batch size)\n",
		median(ratios), len(ratios))

	// Raw latency is sampled before and after the store's, against drift.
	rate := median(rates) / 2
	rawSamples := rawLatency(filepath.Join(dir, "raw-lat0"), 1024, *latencyDuration/2)
	lat := storeLatency(filepath.Join(dir, "lat"), *appenders, *entrySize, rate, *latencyDuration)
	rawLat := percentiles(append(rawSamples, rawLatency(filepath.Join(dir, "raw-lat1"), 1024, *latencyDuration/2)...))
	fmt.Printf("raw write 1 KiB + fdatasync latency: p50 %s p99 %s\n", rawLat.p50, rawLat.p99)
	fmt.Printf("store append latency at %.0f entries/s (half of max), achieved %.0f/s: p50 %s p99 %s p99.9 %s\n",
		rate, lat.achieved, lat.p50, lat.p99, lat.p999)
	fmt.Printf("append_p99_vs_raw_fdatasync=%.2f (append p99 over raw p99; p50 over p50: %.2f; append p99 over raw p50: %.2f)\n",
		float64(lat.p99)/float64(rawLat.p99), float64(lat.p50)/float64(rawLat.p50), float64(lat.p99)/float64(rawLat.p50))

	if *openGiB > 0 {
		openTime(filepath.Join(dir, "open"), *openGiB)
	}
}

func median(v []float64) float64 {
	v = slices.Clone(v)
	slices.Sort(v)
	if len(v)%2 == 0 {
		return (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return v[len(v)/2]
}

// tempDir is removed on a failed check too.
var tempDir string

func check(err error) {
	if err != nil {
		if tempDir != "" {
			os.RemoveAll(tempDir)
		}
		fmt.Fprintln(os.Stderr, "bench-wal:", err)
		os.Exit(1)
	}
}

type throughput struct {
	entriesPerSec, payloadMBps, journalMBps, batchesPerSec, batchBytes float64
}

func storeThroughput(dir string, appenders, entrySize int, d time.Duration) throughput {
	s, err := wal.Open(wal.Config{Dir: dir, Keys: benchKeys})
	check(err)
	defer s.Close()
	payload := make([]byte, entrySize)
	var entries atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	before := s.Stats()
	start := time.Now()
	for a := range appenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for e := int64(0); !stop.Load(); e++ {
				check(s.Append(wal.Entry{Ledger: uint64(a), ID: e, LAC: e - 1, Payload: payload}))
				entries.Add(1)
			}
		}()
	}
	time.Sleep(d)
	stop.Store(true)
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	st := s.Stats()
	batches := float64(st.Batches - before.Batches)
	bytes := float64(st.Bytes - before.Bytes)
	n := float64(entries.Load())
	fmt.Printf("  store commit loop: %.0f%% of the time in fdatasync, %.0f%% in write\n",
		100*(st.SyncTime-before.SyncTime).Seconds()/elapsed, 100*(st.WriteTime-before.WriteTime).Seconds()/elapsed)
	return throughput{
		entriesPerSec: n / elapsed,
		payloadMBps:   n * float64(entrySize) / elapsed / 1e6,
		journalMBps:   bytes / elapsed / 1e6,
		batchesPerSec: batches / elapsed,
		batchBytes:    bytes / batches,
	}
}

type rawResult struct{ mbps, syncsPerSec float64 }

// rawThroughput writes batch-sized buffers sequentially, each followed by
// fdatasync, through the same filesystem code the store uses.
func rawThroughput(dir string, batch int, d time.Duration) rawResult {
	f := createRaw(dir)
	defer f.Close()
	buf := make([]byte, batch)
	var n int
	start := time.Now()
	for time.Since(start) < d {
		_, err := f.Write(buf)
		check(err)
		check(f.Sync())
		n++
	}
	elapsed := time.Since(start).Seconds()
	return rawResult{mbps: float64(n*batch) / elapsed / 1e6, syncsPerSec: float64(n) / elapsed}
}

func createRaw(dir string) walfs.File {
	check(os.MkdirAll(dir, 0o755))
	f, err := walfs.OS{}.Create(filepath.Join(dir, "raw"))
	check(err)
	return f
}

type latencies struct {
	p50, p99, p999 time.Duration
	achieved       float64
}

func percentiles(samples []time.Duration) latencies {
	slices.Sort(samples)
	at := func(q float64) time.Duration {
		return samples[min(len(samples)-1, int(math.Ceil(q*float64(len(samples))))-1)]
	}
	return latencies{p50: at(0.50), p99: at(0.99), p999: at(0.999)}
}

func rawLatency(dir string, size int, d time.Duration) []time.Duration {
	f := createRaw(dir)
	defer f.Close()
	buf := make([]byte, size)
	var samples []time.Duration
	start := time.Now()
	for time.Since(start) < d {
		t := time.Now()
		_, err := f.Write(buf)
		check(err)
		check(f.Sync())
		samples = append(samples, time.Since(t))
	}
	return samples
}

// storeLatency offers rate entries/s spread over the appenders on a fixed
// schedule (open loop) and measures each append from its call to its
// return.
func storeLatency(dir string, appenders, entrySize int, rate float64, d time.Duration) latencies {
	s, err := wal.Open(wal.Config{Dir: dir, Keys: benchKeys})
	check(err)
	defer s.Close()
	payload := make([]byte, entrySize)
	interval := time.Duration(float64(appenders) / rate * float64(time.Second))
	var mu sync.Mutex
	var all []time.Duration
	var wg sync.WaitGroup
	start := time.Now()
	for a := range appenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			next := start.Add(time.Duration(a) * interval / time.Duration(appenders))
			var mine []time.Duration
			for e := int64(0); ; e++ {
				if wait := time.Until(next); wait > 0 {
					time.Sleep(wait)
				}
				if time.Since(start) >= d {
					break
				}
				t := time.Now()
				check(s.Append(wal.Entry{Ledger: uint64(a), ID: e, LAC: e - 1, Payload: payload}))
				mine = append(mine, time.Since(t))
				next = next.Add(interval)
			}
			mu.Lock()
			all = append(all, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	l := percentiles(all)
	l.achieved = float64(len(all)) / time.Since(start).Seconds()
	return l
}

// fillAndExit is the child process of openTime: it fills a store with gib
// GiB of 1 KiB entries and exits without closing it, as a crash would.
func fillAndExit(dir string, gib float64) {
	const entrySize, appenders = 1024, 256
	// Filled under the interval policy only to fill quickly; the store is
	// then reopened under "always", which is what is timed.
	s, err := wal.Open(wal.Config{Dir: dir, SyncInterval: 50 * time.Millisecond, Keys: benchKeys})
	check(err)
	total := int64(gib * (1 << 30) / entrySize)
	payload := make([]byte, entrySize)
	var next atomic.Int64
	var wg sync.WaitGroup
	for a := range appenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for e := int64(0); next.Add(1) <= total; e++ {
				check(s.Append(wal.Entry{Ledger: uint64(a), ID: e, LAC: e - 1, Payload: payload}))
			}
		}()
	}
	wg.Wait()
	_, err = s.Fence(0) // makes everything durable
	check(err)
	os.Exit(0)
}

// openTime fills a store with gib GiB of 1 KiB entries in a child process
// that exits without a clean close (the active segment has no checkpoint),
// appends a torn half-record to the last segment and times Open.
func openTime(dir string, gib float64) {
	total := int64(gib * (1 << 30) / 1024)
	start := time.Now()
	cmd := exec.Command(os.Args[0], "-fill-dir", dir, "-open-gib", fmt.Sprint(gib), fmt.Sprintf("-encrypt=%v", *encrypt))
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	check(cmd.Run())
	fill := time.Since(start)
	// Tear the tail of the last segment.
	names, err := walfs.OS{}.List(dir)
	check(err)
	var lastSeg string
	for _, n := range names {
		if filepath.Ext(n) == ".seg" {
			lastSeg = n
		}
	}
	f, err := os.OpenFile(filepath.Join(dir, lastSeg), os.O_WRONLY|os.O_APPEND, 0)
	check(err)
	torn := make([]byte, 700) // a record prefix promising more bytes than follow
	torn[0], torn[1] = 0x2c, 0x04
	_, err = f.Write(torn)
	check(err)
	check(f.Close())

	if *cold {
		dropCache(dir)
	}
	if *cpuProfile != "" {
		pf, err := os.Create(*cpuProfile)
		check(err)
		check(pprof.StartCPUProfile(pf))
		defer pprof.StopCPUProfile()
	}
	t := time.Now()
	s2, err := wal.Open(wal.Config{Dir: dir, Keys: benchKeys})
	check(err)
	openDur := time.Since(t)
	last := s2.LastEntry(0)
	check(s2.Close())
	fmt.Printf("open: %.2f GiB (%d entries of 1 KiB, written in %s) with a torn tail opened in %s (ledger 0 last entry %d, %d corruptions)\n",
		gib, total, fill.Round(time.Millisecond), openDur.Round(time.Millisecond), last.Last, len(s2.Corruptions()))
	// Open reads every checkpoint (linear in the number of records) and
	// scans one segment (at most SegmentSize) after the last checkpoint.
	cache := "warm"
	if *cold {
		cache = "cold: the store's files evicted with FADV_DONTNEED"
	}
	fmt.Printf("open_seconds=%.3f open_gib=%.2f (page cache %s; one unsealed segment scanned)\n", openDur.Seconds(), gib, cache)
}

// dropCache evicts the files in dir (only those) from the page cache.
func dropCache(dir string) {
	names, err := walfs.OS{}.List(dir)
	check(err)
	for _, n := range names {
		f, err := os.Open(filepath.Join(dir, n))
		check(err)
		check(fileutil.DropCache(f)) // FADV_DONTNEED on Linux, nothing elsewhere
		f.Close()
	}
}
