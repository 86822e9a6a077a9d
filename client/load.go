package client

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"time"

	"orderlog/proto/orderlogpb"
)

// LoadConfig describes a streaming load: Streams idempotent producers,
// each sending frames of Frame messages of Size bytes with up to InFlight
// frames unacknowledged, for Count messages in total or for Duration.
// Rate, if positive, paces all streams together to that many messages/s.
type LoadConfig struct {
	Streams, Size, Count, Frame, InFlight int
	Duration                              time.Duration
	Rate                                  float64
	// Keys > 0 gives each frame's messages the keys k0, k1, … in turn,
	// modulo Keys, spreading them over the topic's virtual partitions
	// (0: no keys, every message in partition 0).
	Keys int
	// Topic is the messages' topic ("": "bench").
	Topic string
	// Payload, if set, is every message's value (Size is then ignored);
	// SchemaID names the schema it is written in (0: none).
	Payload  []byte
	SchemaID uint32
}

// LoadResult is what a load measured.
type LoadResult struct {
	Messages  int
	Bytes     int
	Elapsed   time.Duration
	Latencies []time.Duration // per frame, send to acknowledgement
}

// MessagesPerSecond is the acknowledged message rate.
func (r LoadResult) MessagesPerSecond() float64 { return float64(r.Messages) / r.Elapsed.Seconds() }

// MBPerSecond is the acknowledged payload rate in MB/s.
func (r LoadResult) MBPerSecond() float64 { return float64(r.Bytes) / r.Elapsed.Seconds() / 1e6 }

// Percentile returns the p-quantile (0..1) of the frame latencies.
func (r LoadResult) Percentile(p float64) time.Duration {
	if len(r.Latencies) == 0 {
		return 0
	}
	sorted := append([]time.Duration(nil), r.Latencies...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	return sorted[int(p*float64(len(sorted)-1))]
}

// Validate refuses a load that cannot run: at least one stream, message
// and frame in flight, a size of zero or more, a count or a duration.
func (cfg LoadConfig) Validate() error {
	switch {
	case cfg.Streams < 1 || cfg.Frame < 1 || cfg.InFlight < 1:
		return fmt.Errorf("load: streams (%d), frame (%d) and inflight (%d) must be at least 1", cfg.Streams, cfg.Frame, cfg.InFlight)
	case cfg.Size < 0 || cfg.Count < 0 || cfg.Rate < 0:
		return fmt.Errorf("load: size (%d), count (%d) and rate (%g) must not be negative", cfg.Size, cfg.Count, cfg.Rate)
	case cfg.Count == 0 && cfg.Duration <= 0:
		return errors.New("load: give a count of messages or a duration")
	}
	return nil
}

// RunLoad runs a load against c and waits for every acknowledgement. A
// count is rounded up to whole frames on every stream.
func RunLoad(ctx context.Context, c *Client, cfg LoadConfig) (LoadResult, error) {
	if err := cfg.Validate(); err != nil {
		return LoadResult{}, err
	}
	payload := cfg.Payload
	if payload == nil {
		payload = make([]byte, cfg.Size)
		for i := range payload {
			payload[i] = byte('a' + i%26)
		}
	}
	framesPerStream := -1
	if cfg.Count > 0 {
		framesPerStream = (cfg.Count + cfg.Frame*cfg.Streams - 1) / (cfg.Frame * cfg.Streams)
	}
	deadline := time.Now().Add(cfg.Duration)
	var interval time.Duration // between frames of one stream, for Rate
	if cfg.Rate > 0 {
		interval = time.Duration(float64(time.Second) * float64(cfg.Frame*cfg.Streams) / cfg.Rate)
	}
	var mu sync.Mutex
	var total LoadResult
	var wg sync.WaitGroup
	errs := make(chan error, cfg.Streams)
	start := time.Now()
	for s := 0; s < cfg.Streams; s++ {
		wg.Add(1)
		go func(stream int) {
			defer wg.Done()
			name := fmt.Sprintf("load-%d-%d", start.UnixNano(), stream)
			// Paced streams start evenly spread over one interval, so the
			// rate arrives as a steady flow rather than in lockstep bursts.
			phase := time.Duration(0)
			if cfg.Streams > 0 {
				phase = interval * time.Duration(stream) / time.Duration(cfg.Streams)
			}
			r, err := loadStream(ctx, c, name, payload, cfg, framesPerStream, deadline, interval, phase)
			if err != nil {
				errs <- err
				return
			}
			mu.Lock()
			total.Messages += r.Messages
			total.Bytes += r.Bytes
			total.Latencies = append(total.Latencies, r.Latencies...)
			mu.Unlock()
		}(s)
	}
	wg.Wait()
	total.Elapsed = time.Since(start)
	select {
	case err := <-errs:
		return total, err
	default:
		return total, nil
	}
}

func loadStream(ctx context.Context, cl *Client, name string, payload []byte, cfg LoadConfig,
	frames int, deadline time.Time, interval, phase time.Duration) (LoadResult, error) {
	producer, err := cl.NewProducer(ctx, name, ProducerOptions{MaxInFlight: cfg.InFlight})
	if err != nil {
		return LoadResult{}, err
	}
	defer producer.Close()
	type sent struct {
		pending *Pending
		at      time.Time
	}
	window := make(chan sent, cfg.InFlight)
	var result LoadResult
	waitErr := make(chan error, 1)
	go func() {
		for s := range window {
			if _, err := s.pending.Wait(ctx); err != nil {
				waitErr <- err
				for range window {
				}
				return
			}
			result.Latencies = append(result.Latencies, time.Since(s.at))
		}
		waitErr <- nil
	}()
	// Every frame carries the same messages: they are only read (marshalled,
	// kept for a resend), so one set serves them all.
	messages := make([]*orderlogpb.Message, cfg.Frame)
	for j := range messages {
		messages[j] = &orderlogpb.Message{Topic: cmp.Or(cfg.Topic, "bench"), Value: payload, SchemaId: cfg.SchemaID}
		if cfg.Keys > 0 {
			messages[j].Key = []byte("k" + strconv.Itoa(j%cfg.Keys))
		}
	}
	next := time.Now().Add(phase)
	for i := 0; frames < 0 || i < frames; i++ {
		if frames < 0 && time.Now().After(deadline) {
			break
		}
		if interval > 0 {
			time.Sleep(time.Until(next))
			next = next.Add(interval)
		}
		at := time.Now()
		pending, err := producer.Send(ctx, messages...)
		if err != nil {
			close(window)
			<-waitErr
			return result, err
		}

		window <- sent{pending, at}
		result.Messages += cfg.Frame
		result.Bytes += cfg.Frame * len(payload)
	}
	close(window)
	err = <-waitErr // the waiter has appended every latency once it answers
	return result, err
}
