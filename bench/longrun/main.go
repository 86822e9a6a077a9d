// Command longrun measures whether orderlog's costs grow with its history
// (`make bench-longrun`, issue 16 "Bounded state over long runs"). It
// starts one `orderlog dev` with small ledger-roll and retention
// thresholds, so ledgers roll and are deleted many times, and writes 1 KiB
// messages with several pipelined producers (client.Producer) up to each
// size of -sizes in turn (the history accumulates: 1M, then on to 10M,
// then 50M). At each size it measures, over -rounds restarts:
//
//   - restart: SIGTERM to `orderlog dev`, start it again on the same data,
//     exec to /readyz 200 (a clean stop: SIGKILL would add the old etcd
//     session's expiry, a constant that hides the replay's growth);
//   - sequencer failover: the restarted dev's leader takeover, as it logs
//     it (`sequencer leader elected ... took=`, with `sequencer takeover
//     steps` for where it went). One dev has one sequencer, so this is the
//     takeover's own work (epoch, commit-log replay from the newest
//     checkpoint, older ledgers), not the election's lease wait;
//   - producer takeover: NewProducer of a producer the previous run owned,
//     then its first frame, to the first ack (the node rebuilds its state
//     from the ledgers after its state_ledger);
//   - fresh reader: exec of a separate `orderlog reader` process against
//     the same etcd to its /readyz 200 (it applied the leader's first
//     watermark, having loaded the newest checkpoint if the leader no
//     longer retains the records from 0), then one read through it;
//   - RSS of the dev process (VmRSS) right after the size's writes.
//
// It samples the data directory's disk usage throughout (du), reads offset
// 0 once retention moved the log start (OFFSET_OUT_OF_RANGE expected), and
// ends with longrun_<figure>_ratio= lines (the largest size's median over
// the smallest's, goal ≤ 1.5), longrun_disk_ratio= (largest data directory
// over -retention-bytes, goal ≤ 1.5) and longrun_result=PASS or FAIL. A
// failed goal is a finding: it exits 0 unless something broke.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"orderlog/bench/internal/benchutil"
	"orderlog/client"
)

// bench is the run's state: the dev under test and where things go.
type bench struct {
	devCfg    devConfig
	diskGuard int64 // bytes of data directory at which writing stops
	logDir    string
	load      writeLoad
	rounds    int
	devRuns   int
	current   *dev
}

// sizeResult is what was measured at one size of the history.
type sizeResult struct {
	label                                   string // as -sizes spells it
	size                                    int64
	rounds                                  []round
	rssAfterWrites, rssAfterRounds, diskMax int64
	logStart                                uint64
	writeRate                               float64
}

var cleanup func() // stops the processes when check fails

func main() {
	binary := flag.String("orderlog", "bin/orderlog", "the orderlog binary to start as `orderlog dev` and `orderlog reader`")
	sizesFlag := flag.String("sizes", "1M,10M,50M", "history sizes in messages, increasing (k = 1e3, M = 1e6); quick: 100k,1M,5M")
	size := flag.Int("size", 1024, "message size in bytes")
	producers := flag.Int("producers", 8, "producers writing at once")
	frame := flag.Int("frame", 64, "messages per frame")
	inFlight := flag.Int("inflight", 8, "unacknowledged frames per producer")
	rounds := flag.Int("rounds", 3, "restarts per size; medians are reported")
	retention := flag.String("retention-bytes", "2GiB", "the dev's --retention-bytes")
	roll := flag.String("roll-bytes", "64MiB", "the dev's --ledger-roll-bytes")
	retentionCheck := flag.Duration("retention-check", time.Second, "the dev's --retention-check")
	devFlags := flag.String("dev-flags", "", "more flags for `orderlog dev`, space-separated")
	dir := flag.String("dir", "", "work directory (default: a new one in $TMPDIR, removed at the end)")
	keep := flag.Bool("keep", false, "keep the work directory (data and logs)")
	diskGuard := flag.Float64("disk-guard", 4, "stop writing once the data directory exceeds this many times -retention-bytes (and end with the sizes reached): a log that does not delete would otherwise fill the disk")
	flag.Parse()
	debug.SetGCPercent(400)

	sizes, err := parseSizes(*sizesFlag)
	check(err)
	retentionBytes, err := parseByteSize(*retention)
	check(err)
	_, err = parseByteSize(*roll)
	check(err)
	work := *dir
	if work == "" {
		work, err = os.MkdirTemp("", "orderlog-longrun-")
		check(err)
	}
	if !*keep {
		defer os.RemoveAll(work)
	}
	b := &bench{logDir: filepath.Join(work, "logs"), rounds: *rounds,
		load: writeLoad{producers: *producers, size: *size, frame: *frame, inFlight: *inFlight}}
	b.diskGuard = int64(*diskGuard * float64(retentionBytes))
	check(os.MkdirAll(b.logDir, 0o755))
	b.devCfg = devConfig{binary: *binary, dataDir: filepath.Join(work, "data"), logDir: b.logDir, addrs: newDevAddrs(),
		flags: append([]string{"--ledger-roll-bytes", *roll, "--retention-bytes", *retention,
			"--retention-check", retentionCheck.String()}, strings.Fields(*devFlags)...)}
	fmt.Printf("longrun: sizes %s of %d B messages, %d producers (frames of %d, %d in flight), %d restarts per size\n",
		*sizesFlag, *size, *producers, *frame, *inFlight, *rounds)
	fmt.Printf("longrun: orderlog dev %s; data and logs in %s\n", strings.Join(b.devCfg.flags, " "), work)
	fmt.Println("longrun: restarts are SIGTERM (clean); failover is the restarted dev's own takeover as logged " +
		"(one sequencer: no election wait to measure); the fresh reader is a separate `orderlog reader` process")

	b.current, err = startDev(b.devCfg, 0)
	check(err)
	cleanup = func() { b.current.stop() }
	defer func() { b.current.stop() }()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	_, err = waitReadyz(ctx, b.devCfg.addrs.http)
	cancel()
	check(err)

	disk := watchDisk(b.devCfg.dataDir, 500*time.Millisecond)
	defer disk.Stop()
	results := b.run(sizes, disk)
	b.summarize(results, retentionBytes, disk)
}

// run writes up to each size in turn and measures there.
func (b *bench) run(sizes []int64, disk *diskWatch) []sizeResult {
	var total atomic.Int64
	var results []sizeResult
	runStart := time.Now()
	var measuring time.Duration // the last size's measurements: the ETA's guess for each size left
	for i, target := range sizes {
		fmt.Printf("size %s: writing from %s\n", count(target), count(total.Load()))
		c, err := client.Dial(b.devCfg.addrs.grpc)
		check(err)
		eta := func(rate float64) string {
			left := float64(sizes[len(sizes)-1]-total.Load()) / rate
			guess := measuring
			if guess == 0 {
				guess = time.Duration(b.rounds) * 15 * time.Second
			}
			used, largest := disk.current()
			return fmt.Sprintf("data dir %s (max %s); ETA: writes %s, run ~%s more (elapsed %s)", gib(used), gib(largest),
				seconds(left), (time.Duration(left*float64(time.Second)) + time.Duration(len(sizes)-i)*guess).Round(time.Second),
				time.Since(runStart).Round(time.Second))
		}
		ctx, stopWriting := context.WithCancel(context.Background())
		guard := b.guardDisk(disk, stopWriting)
		rate, err := writeUpTo(ctx, c, b.load, &total, target, 5*time.Second, eta)
		tripped := guard()
		c.Close()
		if tripped {
			_, largest := disk.current()
			fmt.Printf("size %s: STOPPED writing at %s messages: the data directory reached %s, over -disk-guard × -retention-bytes (%s); measuring here as the last size\n",
				count(target), count(total.Load()), gib(largest), gib(b.diskGuard))
			target = total.Load()
			sizes = append(sizes[:i], target)
		} else {
			check(err)
		}
		left := float64(sizes[len(sizes)-1]-total.Load()) / rate
		fmt.Printf("size %s: written at %.0f msg/s; ETA: %s of writes left, run ~%s more (elapsed %s)\n", count(target), rate, seconds(left),
			(time.Duration(left*float64(time.Second)) + time.Duration(len(sizes)-i)*max(measuring, time.Duration(b.rounds)*15*time.Second)).Round(time.Second),
			time.Since(runStart).Round(time.Second))
		measureStart := time.Now()
		res := b.measureSize(count(target), total.Load(), rate, disk)
		measuring = time.Since(measureStart)
		results = append(results, res)
		if tripped {
			break
		}
	}
	return results
}

// guardDisk cancels the writes (stop) once the data directory exceeds
// the guard; the function it returns ends the watch and says whether it
// did.
func (b *bench) guardDisk(disk *diskWatch, stop context.CancelFunc) (end func() (tripped bool)) {
	done := make(chan struct{})
	var fired atomic.Bool
	go func() {
		ticker := time.NewTicker(500 * time.Millisecond)
		defer ticker.Stop()
		for {
			select {
			case <-done:
				return
			case <-ticker.C:
				if _, largest := disk.current(); largest > b.diskGuard {
					fired.Store(true)
					stop()
					return
				}
			}
		}
	}()
	return func() bool {
		close(done)
		stop()
		return fired.Load()
	}
}

// measureSize measures at the history's current size: RSS, the log start
// and what retention did, the offset 0 check, then the restart rounds.
func (b *bench) measureSize(label string, size int64, rate float64, disk *diskWatch) sizeResult {
	res := sizeResult{label: label, size: size, writeRate: rate}
	time.Sleep(3 * time.Second) // a retention pass or two after the last write
	var err error
	res.rssAfterWrites, err = rssBytes(b.current.cmd.Process.Pid)
	check(err)
	metrics := scrapeMetrics(b.devCfg.addrs.http, devMetrics...)
	res.logStart = uint64(metrics["orderlog_log_start"])
	used, largest := disk.current()
	fmt.Printf("size %s: %d messages written at %.0f msg/s; dev RSS %s; data dir %s (max so far %s)\n", label, size, rate,
		mib(res.rssAfterWrites), gib(used), gib(largest))
	fmt.Printf("  dev metrics: %s\n", metricsLine(metrics, devMetrics))
	fmt.Printf("  etcd: %s\n", etcdPeek(b.devCfg.addrs.etcd))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	ok, detail := belowStartCheck(ctx, b.devCfg.addrs.grpc, res.logStart)
	cancel()
	fmt.Printf("  check below the log start: %s: %s\n", passFail(ok), detail)
	for r := range b.rounds {
		next, out, err := b.restartRound(b.current, r, b.load.producerName(r%b.load.producers))
		b.current = next
		check(err)
		fmt.Printf("  round %d: stop %s, restart to /readyz %s, sequencer takeover %s (replay %s from checkpoint ledger %s: %s commit ledgers, %s entries; older ledgers %s), producer takeover to first ack %s (its rebuild as logged %s), fresh reader ready %s\n",
			r, ms(out.stop), ms(out.restart), ms(out.failover.took), ms(out.failover.replay), out.failover.checkpoint,
			out.failover.commitLedgers, out.failover.entriesRead, ms(out.failover.olderLedgers), ms(out.takeover), ms(out.rebuild), ms(out.readerReady))
		res.rounds = append(res.rounds, out)
	}
	res.rssAfterRounds, err = rssBytes(b.current.cmd.Process.Pid)
	check(err)
	_, res.diskMax = disk.current()
	return res
}

// figure is one measured quantity, its goal the largest size's value over
// the smallest's ≤ goalRatio.
type figure struct {
	name  string
	unit  string
	value func(sizeResult) float64
}

const goalRatio = 1.5

var figures = []figure{
	{"restart", "ms", func(s sizeResult) float64 {
		return medianOf(s.rounds, func(r round) time.Duration { return r.restart })
	}},
	{"failover", "ms", func(s sizeResult) float64 {
		return medianOf(s.rounds, func(r round) time.Duration { return r.failover.took })
	}},
	{"takeover", "ms", func(s sizeResult) float64 {
		return medianOf(s.rounds, func(r round) time.Duration { return r.takeover })
	}},
	{"reader_ready", "ms", func(s sizeResult) float64 {
		return medianOf(s.rounds, func(r round) time.Duration { return r.readerReady })
	}},
	// The resident memory of the dev restarted on the history, after its
	// rounds: what holding the history costs. Right after the writes the
	// RSS holds the write load's garbage too (printed, not a goal).
	{"rss", "MiB", func(s sizeResult) float64 { return float64(s.rssAfterRounds) / (1 << 20) }},
}

func medianOf(rounds []round, pick func(round) time.Duration) float64 {
	var xs []float64
	for _, r := range rounds {
		xs = append(xs, float64(pick(r).Microseconds())/1000)
	}
	return benchutil.Median(xs)
}

// summarize prints the table, the ratio lines and the verdict.
func (b *bench) summarize(results []sizeResult, retentionBytes int64, disk *diskWatch) {
	fmt.Printf("\n%-8s %10s", "size", "msg/s")
	for _, f := range figures {
		fmt.Printf(" %14s", f.name+" "+f.unit)
	}
	fmt.Printf(" %12s %12s %14s %15s\n", "rss writes", "disk max", "log start", "replay entries")
	for _, s := range results {
		fmt.Printf("%-8s %10.0f", s.label, s.writeRate)
		for _, f := range figures {
			fmt.Printf(" %14.1f", f.value(s))
		}
		fmt.Printf(" %12s %12s %14d %15s\n", mib(s.rssAfterWrites), gib(s.diskMax), s.logStart, s.rounds[len(s.rounds)-1].failover.entriesRead)
	}
	if len(results) < 2 {
		fmt.Println("longrun_result=FAIL (fewer than two sizes reached: no ratios)")
		return
	}
	first, last := results[0], results[len(results)-1]
	var failed []string
	for _, f := range figures {
		ratio := f.value(last) / f.value(first)
		fmt.Printf("longrun_%s_ratio=%.2f (%s: %.1f %s at %s, %.1f %s at %s; median of %d)\n", f.name, ratio, f.name,
			f.value(last), f.unit, last.label, f.value(first), f.unit, first.label, len(last.rounds))
		if !(ratio <= goalRatio) {
			failed = append(failed, f.name)
		}
	}
	rebuild := func(s sizeResult) float64 {
		return medianOf(s.rounds, func(r round) time.Duration { return r.rebuild })
	}
	fmt.Printf("longrun_takeover_rebuild_ratio=%.2f (not a goal: the node's rebuild of the producer as logged, %.1f ms at %s, %.1f ms at %s)\n",
		rebuild(last)/rebuild(first), rebuild(last), last.label, rebuild(first), first.label)
	afterWrites := float64(last.rssAfterWrites) / float64(first.rssAfterWrites)
	fmt.Printf("longrun_rss_after_writes_ratio=%.2f (not a goal: RSS of the dev right after the size's writes, %s at %s, %s at %s; it holds the write load's garbage)\n",
		afterWrites, mib(last.rssAfterWrites), last.label, mib(first.rssAfterWrites), first.label)
	_, largest := disk.current()
	diskRatio := float64(largest) / float64(retentionBytes)
	fmt.Printf("longrun_disk_ratio=%.2f (largest data directory %s over --retention-bytes %s)\n", diskRatio, gib(largest), gib(retentionBytes))
	if !(diskRatio <= goalRatio) {
		failed = append(failed, "disk")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ok, detail := belowStartCheck(ctx, b.devCfg.addrs.grpc, last.logStart)
	fmt.Printf("longrun_below_start_check=%s (%s)\n", passFail(ok), detail)
	if !ok {
		failed = append(failed, "below_start")
	}
	if len(failed) > 0 {
		fmt.Printf("longrun_result=FAIL (goal ratio ≤ %.1f missed by: %s)\n", goalRatio, strings.Join(failed, ", "))
		return
	}
	fmt.Printf("longrun_result=PASS (every ratio ≤ %.1f)\n", goalRatio)
}

func passFail(ok bool) string {
	if ok {
		return "PASS"
	}
	return "FAIL"
}

// parseSizes reads "100k,1M,5M" as increasing message counts.
func parseSizes(s string) ([]int64, error) {
	var sizes []int64
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		scale := 1.0
		switch {
		case strings.HasSuffix(part, "k"):
			scale, part = 1e3, strings.TrimSuffix(part, "k")
		case strings.HasSuffix(part, "M"):
			scale, part = 1e6, strings.TrimSuffix(part, "M")
		case strings.HasSuffix(part, "G"):
			scale, part = 1e9, strings.TrimSuffix(part, "G")
		}
		v, err := strconv.ParseFloat(part, 64)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("-sizes: want counts such as 100k,1M,5M: %q", s)
		}
		sizes = append(sizes, int64(v*scale))
	}
	if !sort.SliceIsSorted(sizes, func(i, j int) bool { return sizes[i] < sizes[j] }) || len(sizes) < 2 {
		return nil, fmt.Errorf("-sizes: want at least two increasing counts: %q", s)
	}
	return sizes, nil
}

// parseByteSize reads 2GiB, 64MiB or a plain byte count, as orderlog's
// flags do.
func parseByteSize(s string) (int64, error) {
	units := []struct {
		suffix string
		scale  float64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"B", 1}}
	text, scale := strings.TrimSpace(s), 1.0
	for _, u := range units {
		if number, ok := strings.CutSuffix(text, u.suffix); ok {
			text, scale = number, u.scale
			break
		}
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(text), 64)
	if err != nil || v <= 0 {
		return 0, fmt.Errorf("want a byte count such as 2GiB or 64MiB: %q", s)
	}
	return int64(v * scale), nil
}

func gib(b int64) string { return fmt.Sprintf("%.2f GiB", float64(b)/(1<<30)) }
func mib(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }

func seconds(s float64) string {
	return (time.Duration(s * float64(time.Second))).Round(time.Second).String()
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench/longrun:", err)
		if cleanup != nil {
			cleanup()
		}
		os.Exit(1)
	}
}
