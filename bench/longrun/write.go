package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"orderlog/client"
	"orderlog/proto/orderlogpb"
)

// writeLoad is the workload every size continues: the same producers
// (by name, so that after each restart their first frames take them over),
// each sending frames of Frame messages of Size bytes with up to InFlight
// frames unacknowledged.
type writeLoad struct {
	producers, size, frame, inFlight int
}

func (w writeLoad) producerName(i int) string { return fmt.Sprintf("longrun-%d", i) }

// writeUpTo sends messages until total (the whole history's count so far,
// shared across sizes) reaches target, printing a progress line every
// tick with the rate and onTick's text (the ETA, the data directory).
func writeUpTo(ctx context.Context, c *client.Client, w writeLoad, total *atomic.Int64, target int64,
	tick time.Duration, onTick func(rate float64) string) (rate float64, err error) {
	var claimed atomic.Int64
	claimed.Store(total.Load())
	start, startCount := time.Now(), total.Load()
	done := make(chan struct{})
	go func() { // progress
		ticker := time.NewTicker(tick)
		defer ticker.Stop()
		for {
			select {
			case <-done:
				return
			case <-ticker.C:
				r := float64(total.Load()-startCount) / time.Since(start).Seconds()
				fmt.Printf("  writing: %s of %s messages, %.0f msg/s (%.1f MB/s); %s\n",
					count(total.Load()), count(target), r, r*float64(w.size)/1e6, onTick(r))
			}
		}
	}()
	errs := make([]error, w.producers)
	var wg sync.WaitGroup
	for i := range w.producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = writeStream(ctx, c, w, w.producerName(i), &claimed, total, target)
		}()
	}
	wg.Wait()
	close(done)
	return float64(total.Load()-startCount) / time.Since(start).Seconds(), errors.Join(errs...)
}

// writeStream is one producer's share: it claims a frame at a time from
// the shared count until target is reached, and counts acknowledged
// messages into total.
func writeStream(ctx context.Context, c *client.Client, w writeLoad, name string, claimed, total *atomic.Int64, target int64) error {
	producer, err := c.NewProducer(ctx, name, client.ProducerOptions{MaxInFlight: w.inFlight})
	if err != nil {
		return fmt.Errorf("producer %s: %w", name, err)
	}
	defer producer.Close()
	payload := make([]byte, w.size)
	for i := range payload {
		payload[i] = byte('a' + i%26)
	}
	// Every frame carries the same messages: they are only read.
	messages := make([]*orderlogpb.Message, w.frame)
	for j := range messages {
		messages[j] = &orderlogpb.Message{Topic: "longrun", Value: payload}
	}
	window := make(chan *client.Pending, w.inFlight)
	waitErr := make(chan error, 1)
	go func() {
		for pending := range window {
			if _, err := pending.Wait(ctx); err != nil {
				waitErr <- fmt.Errorf("producer %s: %w", name, err)
				for range window {
				}
				return
			}
			total.Add(int64(w.frame))
		}
		waitErr <- nil
	}()
	for claimed.Add(int64(w.frame)) <= target {
		pending, err := producer.Send(ctx, messages...)
		if err != nil {
			close(window)
			<-waitErr
			return fmt.Errorf("producer %s: %w", name, err)
		}
		window <- pending
	}
	close(window)
	return <-waitErr
}

// count prints a message count as the -sizes flag spells it.
func count(n int64) string {
	switch {
	case n >= 1e6 && n%1e5 == 0:
		return trimZero(fmt.Sprintf("%.1f", float64(n)/1e6)) + "M"
	case n >= 1e3 && n%100 == 0:
		return trimZero(fmt.Sprintf("%.1f", float64(n)/1e3)) + "k"
	case n >= 1e6:
		return fmt.Sprintf("%.2fM", float64(n)/1e6)
	}
	return fmt.Sprint(n)
}

func trimZero(s string) string {
	if len(s) > 2 && s[len(s)-2:] == ".0" {
		return s[:len(s)-2]
	}
	return s
}
