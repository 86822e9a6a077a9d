package main

import (
	"context"
	"fmt"
	"os"
	"runtime/pprof"
	"time"

	"orderlog/client"
)

func runBench(args []string) error {
	fs := newFlagSet("bench", "bench [flags]\n\nStreams messages into a running orderlog through idempotent producers and\nprints throughput and ack latency (fsync before ack, as configured on the server).")
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
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	if *cpuProfile != "" {
		stop, err := startCPUProfile(*cpuProfile)
		if err != nil {
			return err
		}
		defer stop()
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
