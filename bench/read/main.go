// Command read benchmarks orderlog's read side (`make bench-read`, issue
// 18). It starts `orderlog dev` as a separate process on a fresh data
// directory (--archive none, fsync before ack as by default), as
// bench/e2e does, and runs `orderlog bench --read` against it, a process
// of its own: 16 idempotent streams of 1 KiB messages at the peak rate as
// the reference, each round followed by a range read of the log from
// offset 0 through the Go client; then producers paced at half the peak
// with a consumer tailing the log. Last it times the CLI over the same
// log, `orderlog read --limit 0` to /dev/null (JSON printing included).
//
// It ends with `orderlog bench --read`'s summary (read_vs_produce_ratio=,
// tail_p99_ms=, tail_p99_vs_ack_p99_ratio=, group_keeps_up=) and
// cli_read_msgs_per_s=.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"orderlog/bench/internal/benchutil"
	"orderlog/client"
)

func main() {
	binary := flag.String("orderlog", "bin/orderlog", "the orderlog binary to start as `orderlog dev` and `orderlog bench --read`")
	duration := flag.Duration("duration", 5*time.Second, "length of each produce round (peak, and half rate with the tail)")
	rounds := flag.Int("rounds", 3, "rounds of each measurement; medians are reported")
	readLimit := flag.Uint("read-limit", 0, "most messages a range read takes from offset 0 (0: the whole log)")
	cliRounds := flag.Int("cli-rounds", 3, "rounds of `orderlog read --limit 0 > /dev/null` over the log at the end (0: none)")
	streams := flag.Int("streams", 16, "producer streams")
	size := flag.Int("size", 1024, "message size")
	serverArgs := flag.String("server-args", "", "more flags for orderlog dev, space-separated")
	flag.Parse()

	dir, err := os.MkdirTemp("", "orderlog-read-bench")
	check(err)
	defer os.RemoveAll(dir)
	addr, pid, stop := startDev(*binary, filepath.Join(dir, "dev"), strings.Fields(*serverArgs))
	defer stop()

	bench := exec.Command(*binary, "bench", "--read", "--addr", addr, "--server-pid", fmt.Sprint(pid), "--duration", duration.String(),
		"--rounds", fmt.Sprint(*rounds), "--read-limit", fmt.Sprint(*readLimit),
		"--streams", fmt.Sprint(*streams), "--size", fmt.Sprint(*size))
	bench.Stdout, bench.Stderr = os.Stdout, os.Stderr
	check(bench.Run())
	if *cliRounds > 0 {
		cliRead(*binary, addr, *cliRounds)
	}
}

// startDev starts `orderlog dev` on dataDir and waits until it is ready;
// stop ends it.
func startDev(binary, dataDir string, extra []string) (addr string, pid int, stop func()) {
	args := append([]string{"dev", "--data", dataDir, "--grpc-addr", "127.0.0.1:0",
		"--http-addr", "127.0.0.1:0", "--etcd-addr", "127.0.0.1:0", "--archive", "none"}, extra...)
	server := exec.Command(binary, args...)
	server.Stderr = os.Stderr
	stdout, err := server.StdoutPipe()
	check(err)
	check(server.Start())
	stop = func() {
		_ = server.Process.Signal(syscall.SIGTERM)
		_ = server.Wait()
	}
	addr, err = benchutil.ReadGRPCAddr(stdout)
	if err != nil {
		stop()
		check(err)
	}
	return addr, server.Process.Pid, stop
}

// cliRead times `orderlog read --limit 0` to /dev/null over the whole log,
// rounds times, and prints the median rate.
func cliRead(binary, addr string, rounds int) {
	c, err := client.Dial(addr)
	check(err)
	defer c.Close()
	status, err := c.Status(context.Background())
	check(err)
	messages := status.Committed - status.HoleOffsets // nothing produces now
	devNull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	check(err)
	defer devNull.Close()
	var rates []float64
	for r := range rounds {
		read := exec.Command(binary, "read", "--addr", addr, "--offset", "0", "--limit", "0")
		read.Stdout, read.Stderr = devNull, os.Stderr
		start := time.Now()
		check(read.Run())
		elapsed := time.Since(start)
		rates = append(rates, float64(messages)/elapsed.Seconds())
		fmt.Printf("cli round %d: orderlog read --limit 0 > /dev/null: %d messages in %s: %.0f msg/s\n",
			r, messages, elapsed.Round(time.Millisecond), rates[r])
	}
	fmt.Printf("cli_read_msgs_per_s=%.0f (median of %d rounds: orderlog read --limit 0 > /dev/null, %d messages)\n",
		benchutil.Median(rates), rounds, messages)
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench/read:", err)
		os.Exit(1)
	}
}
