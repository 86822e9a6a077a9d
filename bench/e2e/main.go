// Command e2e benchmarks orderlog end to end (`make bench-e2e`, part of
// `make bench`): in one run it measures the WAL store's own append
// throughput (bench/wal, 1 KiB entries, 64 appenders, fsync always) as the
// reference, then starts `orderlog dev` as a separate process on the same
// disk and drives it with the `orderlog bench` load (16 idempotent gRPC
// streams of 1 KiB messages, fsync before ack): first as fast as it goes,
// then at half that rate for the latency. The half-rate p99 is compared
// with an ideal group-commit log on the same disk at the same rate, measured
// right after it (e2e_p99_vs_ideal_p99_ratio), and each round reports how
// often a sleeping thread woke up late meanwhile (stalls.go): on a shared or
// quota-limited machine those stalls bound the p99. It ends with the lines
// e2e_msgs_per_s=<n> and e2e_vs_wal_ratio=<x>.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"orderlog/bench/internal/benchutil"
	"orderlog/client"
)

func main() {
	binary := flag.String("orderlog", "bin/orderlog", "the orderlog binary to start as `orderlog dev`")
	duration := flag.Duration("duration", 8*time.Second, "length of each measurement")
	streams := flag.Int("streams", 16, "producer streams")
	size := flag.Int("size", 1024, "message size")
	latencyRounds := flag.Int("latency-rounds", 5, "alternating ideal/e2e half-rate rounds; medians are reported (the machine's speed drifts by the minute: one slow phase should move one round, not the figure)")
	fsyncPolicy := flag.String("fsync", "", "the server's --fsync policy (default: the server's default)")
	serverArgs := flag.String("server-args", "", `more flags for orderlog dev, space-separated: "--ledger-roll-bytes 64MiB --retention-bytes 512MiB" measures the write path while ledgers roll and retention deletes them`)
	flag.Parse()
	debug.SetGCPercent(400) // as the orderlog binary does, so the load's own GC does not pad latencies

	dir, err := os.MkdirTemp("", "orderlog-e2e-bench")
	check(err)
	defer os.RemoveAll(dir)

	walRate := walReference(filepath.Join(dir, "wal"), *duration)
	fmt.Printf("wal_entries_per_s=%.0f (bench/wal, same disk, same run)\n", walRate)

	var extra []string
	if *fsyncPolicy != "" {
		extra = append(extra, "--fsync", *fsyncPolicy)
	}
	dev, err := benchutil.StartDev(*binary, filepath.Join(dir, "dev"), os.Stderr, append(extra, strings.Fields(*serverArgs)...)...)
	check(err)
	defer dev.Stop()
	c := dev.Client

	ctx := context.Background()
	load := client.LoadConfig{Streams: *streams, Size: *size, Frame: 64, InFlight: 8, Duration: *duration}
	_, err = client.RunLoad(ctx, c, client.LoadConfig{Streams: *streams, Size: *size, Frame: 64, InFlight: 8, Duration: time.Second})
	check(err) // warm-up: ledgers open, reservations made
	peak, err := client.RunLoad(ctx, c, load)
	check(err)
	report("peak", peak)
	load.Rate = peak.MessagesPerSecond() / 2
	// Alternate the e2e half-rate run with an ideal group-commit log taking
	// the same frames on the same disk (the latency floor of this disk at this
	// rate), so a disk stall in one round hits one pair, not the figure;
	// medians over the rounds are reported.
	var e2eP99, idealP99, ratios, e2eStalls []float64
	for r := 0; r < *latencyRounds; r++ {
		watch := watchStalls()
		half, err := client.RunLoad(ctx, c, load)
		check(err)
		halfStalls := watch.Stop()
		report(fmt.Sprintf("round %d: at half rate (%.0f msg/s asked)", r, load.Rate), half)
		fmt.Printf("round %d: the machine meanwhile: %s\n", r, halfStalls)
		watch = watchStalls()
		ideal := idealGroupCommit(filepath.Join(dir, "groupcommit"), load.Frame*load.Size, load.Rate/float64(load.Frame), *duration)
		idealStalls := watch.Stop()
		fmt.Printf("round %d: ideal group commit at half rate (same frames, same disk): ack p50 %.2f ms, p99 %.2f ms, p99.9 %.2f ms; the machine meanwhile: %s\n",
			r, ms(percentile(ideal, 0.5)), ms(percentile(ideal, 0.99)), ms(percentile(ideal, 0.999)), idealStalls)
		e2eStalls = append(e2eStalls, float64(halfStalls.count))
		e2eP99 = append(e2eP99, ms(half.Percentile(0.99)))
		idealP99 = append(idealP99, ms(percentile(ideal, 0.99)))
		ratios = append(ratios, float64(half.Percentile(0.99))/float64(percentile(ideal, 0.99)))
	}

	fmt.Printf("e2e_p99_ack_ms_at_half_rate=%.3f (median of %d rounds)\n", benchutil.Median(e2eP99), *latencyRounds)
	fmt.Printf("ideal_group_commit_p99_ms=%.3f (median of %d rounds)\n", benchutil.Median(idealP99), *latencyRounds)
	fmt.Printf("e2e_p99_vs_ideal_p99_ratio=%.2f (median of %d rounds)\n", benchutil.Median(ratios), *latencyRounds)
	fmt.Printf("e2e_stalls_per_round=%.0f (median of %d rounds: wake-ups over %s late while the half-rate load ran)\n", benchutil.Median(e2eStalls), *latencyRounds, stallThreshold)
	fmt.Printf("e2e_mb_per_s=%.1f\n", peak.MBPerSecond())
	fmt.Printf("e2e_msgs_per_s=%.0f\n", peak.MessagesPerSecond())
	fmt.Printf("e2e_vs_wal_ratio=%.2f\n", peak.MessagesPerSecond()/walRate)
}

// walReference runs the WAL store benchmark once and returns its
// entries/s.
func walReference(dir string, duration time.Duration) float64 {
	cmd := exec.Command("go", "run", "./bench/wal", "-dir", dir, "-rounds", "1", "-open-gib", "0",
		"-duration", duration.String())
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	check(err)
	check(cmd.Start())
	pattern := regexp.MustCompile(`round 0 store: ([0-9.]+) entries/s`)
	var rate float64
	scanner := bufio.NewScanner(out)
	for scanner.Scan() {
		fmt.Println("  wal: " + scanner.Text())
		if m := pattern.FindStringSubmatch(scanner.Text()); m != nil {
			rate, _ = strconv.ParseFloat(m[1], 64)
		}
	}
	check(cmd.Wait())
	if rate == 0 {
		check(fmt.Errorf("bench/wal printed no store rate"))
	}
	return rate
}

func report(label string, r client.LoadResult) {
	fmt.Printf("%s: %.0f msg/s, %.1f MB/s, ack p50 %.2f ms, p99 %.2f ms, p99.9 %.2f ms\n", label,
		r.MessagesPerSecond(), r.MBPerSecond(), ms(r.Percentile(0.5)), ms(r.Percentile(0.99)), ms(r.Percentile(0.999)))
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench/e2e:", err)
		os.Exit(1)
	}
}

// grpcAddr is orderlog dev's gRPC address from its banner.
