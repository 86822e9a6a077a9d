// Command console measures what a web console tab following the live
// tail costs the produce path (issue 22): bench-e2e's peak load (16
// streams of 1 KiB messages) against one `orderlog dev`, in rounds that
// alternate a headless Chromium tab on /ui/tail (following the whole log)
// with the same tab on about:blank. It prints, per round, msg/s and the
// server's CPU per message, and ends with medians:
//
//	console_vs_plain_ratio=       peak msg/s with the tab over without (goal: within noise of 1)
//	console_cpu_per_msg_ratio=    the server's CPU per message, with over without
//
// The browser runs on the same machine as the server and the load, as a
// user's would on a laptop; its own CPU is in the first figure, not the
// second.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/chromedp/chromedp"

	"orderlog/bench/internal/benchutil"
	"orderlog/client"
)

func main() {
	binary := flag.String("orderlog", "bin/orderlog", "the orderlog binary to start as `orderlog dev`")
	chromium := flag.String("chromium", "chromium", "the Chromium binary that runs the console tab")
	duration := flag.Duration("duration", 8*time.Second, "length of each measurement")
	rounds := flag.Int("rounds", 3, "rounds, each one run with the tab and one without (alternating); medians are reported")
	streams := flag.Int("streams", 16, "producer streams")
	size := flag.Int("size", 1024, "message size")
	flag.Parse()
	debug.SetGCPercent(400) // as bench/e2e does

	dir, err := os.MkdirTemp("", "orderlog-console-bench")
	check(err)
	defer os.RemoveAll(dir)
	dev, err := benchutil.StartDev(*binary, filepath.Join(dir, "dev"), nil)
	check(err)
	defer dev.Stop()
	server, httpAddr, c := dev.Cmd, dev.HTTPAddr, dev.Client

	tab, closeTab := openTab(*chromium)
	defer closeTab()
	ctx := context.Background()
	load := client.LoadConfig{Streams: *streams, Size: *size, Frame: 64, InFlight: 8, Duration: *duration}
	_, err = client.RunLoad(ctx, c, client.LoadConfig{Streams: *streams, Size: *size, Frame: 64, InFlight: 8, Duration: time.Second})
	check(err) // warm-up: ledgers open, reservations made

	var ratios, cpuRatios, with, without []float64
	for r := range *rounds {
		// Alternate which goes first, so a drift of the machine's speed
		// within a round does not favour one side.
		order := []bool{r%2 == 0, r%2 != 0}
		var rate, cpu [2]float64
		for _, console := range order {
			page := "about:blank"
			if console {
				page = "http://" + httpAddr + "/ui/tail"
			}
			check(chromedp.Do(tab, chromedp.Navigate(page)))
			cpuBefore := processCPU(server.Process.Pid)
			result, err := client.RunLoad(ctx, c, load)
			check(err)
			i := 0
			if console {
				i = 1
			}
			rate[i] = result.MessagesPerSecond()
			cpu[i] = (processCPU(server.Process.Pid) - cpuBefore).Seconds() / float64(result.Messages)
			fmt.Printf("round %d %-12s %8.0f msg/s, server CPU %.2f µs/msg, ack p99 %.2f ms\n", r, label(console), rate[i],
				cpu[i]*1e6, float64(result.Percentile(0.99))/1e6)
		}
		without, with = append(without, rate[0]), append(with, rate[1])
		ratios = append(ratios, rate[1]/rate[0])
		cpuRatios = append(cpuRatios, cpu[1]/cpu[0])
	}
	fmt.Printf("plain_msgs_per_s=%.0f (median of %d rounds)\n", benchutil.Median(without), *rounds)
	fmt.Printf("console_msgs_per_s=%.0f (median of %d rounds, a tab following /ui/tail)\n", benchutil.Median(with), *rounds)
	fmt.Printf("console_cpu_per_msg_ratio=%.2f (median of %d rounds: the server's CPU per message)\n", benchutil.Median(cpuRatios), *rounds)
	fmt.Printf("console_vs_plain_ratio=%.2f (median of %d rounds)\n", benchutil.Median(ratios), *rounds)
}

func label(console bool) string {
	if console {
		return "console tab"
	}
	return "no console"
}

// openTab starts headless Chromium with one tab.
func openTab(chromium string) (context.Context, func()) {
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium), chromedp.NoSandbox,
		chromedp.Headless, chromedp.DisableGPU, chromedp.WindowSize(1280, 900))
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(allocCtx)
	check(chromedp.Do(ctx, chromedp.Navigate("about:blank")))
	return ctx, func() { cancel(); cancelAlloc() }
}

// processCPU is the user and system CPU time pid used so far
// (/proc/PID/stat, in clock ticks of 10 ms).
func processCPU(pid int) time.Duration {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	check(err)
	text := string(raw)
	fields := strings.Fields(text[strings.LastIndexByte(text, ')')+1:]) // the command name may hold spaces
	utime, err := strconv.ParseInt(fields[11], 10, 64)
	check(err)
	stime, err := strconv.ParseInt(fields[12], 10, 64)
	check(err)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench/console:", err)
		os.Exit(1)
	}
}
