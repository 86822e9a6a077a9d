package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"orderlog/client"
	"orderlog/proto/orderlogpb"
)

// The rows: 8 topics (the dictionary-encoded column), keys from 50,000
// customers, a message id each, a client time, one header and a 1 KiB
// JSON-like payload (compressible as real payloads are), as
// tiering/parquetfile's benchmark rows. Frames are drawn from a pool of
// framePool distinct frames, so the bench spends no CPU building messages
// while it measures.
const (
	framePool    = 512
	frameRows    = 64
	customerKeys = 50_000
)

// presentKey is a key the rows hold (the first pooled message's);
// absentKey is one they do not, inside the key column's min/max
// statistics ("customer-25000" < absentKey < "customer-25001"), so that
// only the bloom filters can rule the row groups out.
var (
	presentKey []byte
	absentKey  = []byte("customer-25000-absent")
)

// rowFrames builds the pool of frames of rowSize-byte payloads.
func rowFrames(rowSize int) [][]*orderlogpb.Message {
	rng := rand.New(rand.NewPCG(5, 5))
	frames := make([][]*orderlogpb.Message, framePool)
	for f := range frames {
		frames[f] = make([]*orderlogpb.Message, frameRows)
		for j := range frames[f] {
			i := f*frameRows + j
			payload := make([]byte, 0, rowSize+100)
			for len(payload) < rowSize {
				payload = fmt.Appendf(payload, `{"user":%d,"item":"sku-%06d","qty":%d,"price":%d.%02d},`,
					rng.IntN(100000), rng.IntN(1000000), rng.IntN(10), rng.IntN(1000), rng.IntN(100))
			}
			frames[f][j] = &orderlogpb.Message{
				Topic:        fmt.Sprintf("orders-%d", i%8),
				Key:          fmt.Appendf(nil, "customer-%05d", rng.IntN(customerKeys)),
				Value:        payload[:rowSize],
				MessageId:    fmt.Appendf(nil, "%016x", rng.Uint64()),
				ClientTimeUs: time.Now().UnixMicro(),
				Headers:      []*orderlogpb.Header{{Key: "content-type", Value: []byte("application/json")}},
			}
		}
	}
	presentKey = frames[0][0].Key
	return frames
}

// produceRows writes rows messages (rounded up to whole frames) with
// producers pipelined producers and returns the acknowledged rate.
func produceRows(ctx context.Context, c *client.Client, frames [][]*orderlogpb.Message, rows int64, producers, inFlight int) (float64, error) {
	var claimed, acked atomic.Int64
	start := time.Now()
	stop := make(chan struct{})
	go func() {
		ticker := time.NewTicker(5 * time.Second)
		defer ticker.Stop()
		for {
			select {
			case <-stop:
				return
			case <-ticker.C:
				fmt.Printf("  producing: %d of %d rows, %.0f rows/s\n", acked.Load(), rows, float64(acked.Load())/time.Since(start).Seconds())
			}
		}
	}()
	errs := make([]error, producers)
	var wg sync.WaitGroup
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[p] = produceStream(ctx, c, fmt.Sprintf("tiering-bench-%d", p), frames, rows, inFlight, &claimed, &acked)
		}()
	}
	wg.Wait()
	close(stop)
	return float64(acked.Load()) / time.Since(start).Seconds(), errors.Join(errs...)
}

// produceStream is one producer's share: it claims a frame at a time
// until rows are claimed and counts acknowledged rows into acked.
func produceStream(ctx context.Context, c *client.Client, name string, frames [][]*orderlogpb.Message, rows int64,
	inFlight int, claimed, acked *atomic.Int64) error {
	producer, err := c.NewProducer(ctx, name, client.ProducerOptions{MaxInFlight: inFlight})
	if err != nil {
		return fmt.Errorf("producer %s: %w", name, err)
	}
	defer producer.Close()
	window := make(chan *client.Pending, inFlight)
	waitErr := make(chan error, 1)
	go func() {
		for pending := range window {
			if _, err := pending.Wait(ctx); err != nil {
				waitErr <- fmt.Errorf("producer %s: %w", name, err)
				for range window {
				}
				return
			}
			acked.Add(frameRows)
		}
		waitErr <- nil
	}()
	for {
		n := claimed.Add(frameRows)
		if n-frameRows >= rows {
			break
		}
		pending, err := producer.Send(ctx, frames[(n/frameRows)%framePool]...)
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
