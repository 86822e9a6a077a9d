package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"runtime/pprof"
	"time"

	"orderlog/client"
)

func runBench(args []string) error {
	fs := newFlagSet("bench", "bench [flags]\n\nStreams messages into a running orderlog through idempotent producers and\nprints throughput and ack latency (fsync before ack, as configured on the server).\n"+
		"With --read it measures the read side against that in the same run: range reads\nfrom offset 0 over the log against the peak produce rate, and delivery to a\ntailing consumer against the ack at half that rate (medians of --rounds).")
	var cf clientFlags
	cf.register(fs)
	var cfg client.LoadConfig
	fs.IntVar(&cfg.Streams, "streams", 16, "concurrent producer streams")
	fs.IntVar(&cfg.Size, "size", 1024, "message size in bytes")
	fs.IntVar(&cfg.Count, "count", 0, "messages in total (0 = run for --duration)")
	fs.DurationVar(&cfg.Duration, "duration", 10*time.Second, "how long to run when --count is 0")
	fs.IntVar(&cfg.Frame, "frame", 64, "messages per request frame")
	fs.IntVar(&cfg.InFlight, "inflight", 8, "unacknowledged frames per stream")
	fs.Float64Var(&cfg.Rate, "rate", 0, "target messages per second over all streams (0 = as fast as possible)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the load generator itself to this `file`")
	read := fs.Bool("read", false, "measure the read side (range reads and tail latency) against the produce rate, in rounds of --duration")
	rounds := fs.Int("rounds", 3, "with --read: rounds of each measurement (medians are printed)")
	readLimit := fs.Uint("read-limit", 0, "with --read: most messages a range read takes from offset 0 (0 = up to the committed watermark)")
	serverPID := fs.Int("server-pid", 0, "with --read: the server's process id on this machine (Linux), to add its CPU to the CPU per message produced and read (0 = this process's CPU only)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	if *read && (*rounds < 1 || cfg.Count > 0 || *readLimit > math.MaxUint32) {
		return fmt.Errorf("bench --read: needs --rounds >= 1 and a --duration, not a --count; --read-limit at most %d", uint32(math.MaxUint32))
	}
	if *cpuProfile != "" {
		stop, err := startCPUProfile(*cpuProfile)
		if err != nil {
			return err
		}
		defer stop()
	}
	if *read {
		readCfg := readBenchConfig{load: cfg, rounds: *rounds, readLimit: uint32(*readLimit), serverPID: *serverPID}
		return cf.withClient(func(ctx context.Context, _ *client.Client) error {
			return runReadBench(ctx, cf.dial, readCfg)
		})
	}
	return cf.withClient(func(ctx context.Context, cl *client.Client) error {
		result, err := client.RunLoad(ctx, cl, cfg)
		if err != nil {
			return err
		}
		printLoad(result)
		return nil
	})
}

// printLoad prints a load result, one key=value per line.
func printLoad(r client.LoadResult) {
	fmt.Printf("messages=%d elapsed=%s\n", r.Messages, r.Elapsed.Round(time.Millisecond))
	fmt.Printf("msgs_per_s=%.0f\nmb_per_s=%.1f\n", r.MessagesPerSecond(), r.MBPerSecond())
	fmt.Printf("ack_p50_ms=%.3f\nack_p99_ms=%.3f\nack_p999_ms=%.3f\n",
		ms(r.Percentile(0.50)), ms(r.Percentile(0.99)), ms(r.Percentile(0.999)))
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// startCPUProfile profiles this process into path until the returned stop
// is called: the load generator shares the machine with the server it
// measures, so what it costs is worth seeing.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("cpuprofile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}
