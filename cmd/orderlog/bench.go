package main

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"orderlog/client"
	"orderlog/proto/orderlogpb"
)

// benchResult is what one `orderlog bench` run measured.
type benchResult struct {
	messages  int
	bytes     int
	elapsed   time.Duration
	latencies []time.Duration // per frame, send → ack
}

func (r benchResult) msgsPerSecond() float64 { return float64(r.messages) / r.elapsed.Seconds() }

func (r benchResult) percentile(p float64) time.Duration {
	if len(r.latencies) == 0 {
		return 0
	}
	sort.Slice(r.latencies, func(i, j int) bool { return r.latencies[i] < r.latencies[j] })
	return r.latencies[int(p*float64(len(r.latencies)-1))]
}

func runBench(args []string) error {
	fs := newFlagSet("bench", "bench [flags]\n\nStreams messages into a running orderlog through idempotent producers and\nprints throughput and ack latency (fsync before ack, as configured on the server).")
	var cf clientFlags
	cf.register(fs)
	streams := fs.Int("streams", 16, "concurrent producer streams")
	size := fs.Int("size", 1024, "message size in bytes")
	count := fs.Int("count", 0, "messages in total (0 = run for --duration)")
	duration := fs.Duration("duration", 10*time.Second, "how long to run when --count is 0")
	frame := fs.Int("frame", 64, "messages per request frame")
	inflight := fs.Int("inflight", 8, "unacknowledged frames per stream")
	rate := fs.Float64("rate", 0, "target messages per second over all streams (0 = as fast as possible)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cl, ctx, cancel, err := cf.dial()
	if err != nil {
		return err
	}
	defer cancel()
	defer cl.Close()
	result, err := runBenchLoad(ctx, cl, benchConfig{streams: *streams, size: *size, count: *count,
		duration: *duration, frame: *frame, inflight: *inflight, rate: *rate})
	if err != nil {
		return err
	}
	fmt.Printf("messages=%d elapsed=%s\n", result.messages, result.elapsed.Round(time.Millisecond))
	fmt.Printf("msgs_per_s=%.0f\nmb_per_s=%.1f\n", result.msgsPerSecond(), float64(result.bytes)/result.elapsed.Seconds()/1e6)
	fmt.Printf("ack_p50_ms=%.3f\nack_p99_ms=%.3f\nack_p999_ms=%.3f\n",
		ms(result.percentile(0.50)), ms(result.percentile(0.99)), ms(result.percentile(0.999)))
	return nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

type benchConfig struct {
	streams, size, count, frame, inflight int
	duration                              time.Duration
	rate                                  float64
}

func runBenchLoad(ctx context.Context, cl *client.Client, cfg benchConfig) (benchResult, error) {
	payload := make([]byte, cfg.size)
	for i := range payload {
		payload[i] = byte('a' + i%26)
	}
	framesPerStream := -1
	if cfg.count > 0 {
		framesPerStream = (cfg.count + cfg.frame*cfg.streams - 1) / (cfg.frame * cfg.streams)
	}
	deadline := time.Now().Add(cfg.duration)
	var interval time.Duration // between frames of one stream, for --rate
	if cfg.rate > 0 {
		interval = time.Duration(float64(time.Second) * float64(cfg.frame*cfg.streams) / cfg.rate)
	}
	var mu sync.Mutex
	var total benchResult
	var wg sync.WaitGroup
	errs := make(chan error, cfg.streams)
	start := time.Now()
	for s := 0; s < cfg.streams; s++ {
		wg.Add(1)
		go func(stream int) {
			defer wg.Done()
			r, err := benchStream(ctx, cl, fmt.Sprintf("bench-%d-%d", start.UnixNano(), stream), payload, cfg, framesPerStream, deadline, interval)
			if err != nil {
				errs <- err
				return
			}
			mu.Lock()
			total.messages += r.messages
			total.bytes += r.bytes
			total.latencies = append(total.latencies, r.latencies...)
			mu.Unlock()
		}(s)
	}
	wg.Wait()
	total.elapsed = time.Since(start)
	select {
	case err := <-errs:
		return total, err
	default:
		return total, nil
	}
}

func benchStream(ctx context.Context, cl *client.Client, name string, payload []byte, cfg benchConfig,
	frames int, deadline time.Time, interval time.Duration) (benchResult, error) {
	producer, err := cl.NewProducer(ctx, name, client.ProducerOptions{MaxInFlight: cfg.inflight})
	if err != nil {
		return benchResult{}, err
	}
	defer producer.Close()
	type sent struct {
		pending *client.Pending
		at      time.Time
	}
	window := make(chan sent, cfg.inflight)
	var result benchResult
	waitErr := make(chan error, 1)
	go func() {
		for s := range window {
			if _, err := s.pending.Wait(ctx); err != nil {
				waitErr <- err
				for range window {
				}
				return
			}
			result.latencies = append(result.latencies, time.Since(s.at))
		}
		waitErr <- nil
	}()
	next := time.Now()
	for i := 0; frames < 0 || i < frames; i++ {
		if frames < 0 && time.Now().After(deadline) {
			break
		}
		if interval > 0 {
			time.Sleep(time.Until(next))
			next = next.Add(interval)
		}
		messages := make([]*orderlogpb.Message, cfg.frame)
		for j := range messages {
			messages[j] = &orderlogpb.Message{Topic: "bench", Value: payload}
		}
		at := time.Now()
		pending, err := producer.Send(ctx, messages...)
		if err != nil {
			close(window)
			<-waitErr
			return result, err
		}

		window <- sent{pending, at}
		result.messages += cfg.frame
		result.bytes += cfg.frame * len(payload)
	}
	close(window)
	err = <-waitErr // the waiter has appended every latency once it answers
	return result, err
}
