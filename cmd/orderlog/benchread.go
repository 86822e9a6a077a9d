package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"orderlog/client"
	"orderlog/internal/proccpu"
	"orderlog/proto/orderlogpb"
	"orderlog/reader"
)

// `orderlog bench --read` measures the read side against the write side of
// the same server in the same run (issue 18), medians of rounds:
//
//   - range reads: each round produces at the peak rate for --duration (the
//     reference, as plain `orderlog bench`), then reads the log from offset
//     0 through the Go client (client.Read, the Reader/Read stream) on a
//     connection of its own; read_vs_produce_ratio is the median of the
//     rounds' read msg/s over their produce msg/s;
//   - tail latency: producers paced at half the median peak, and a
//     consumer tailing the log (client.Tail) on its own connection. A
//     frame's ack latency is send to ack; its delivery latency is send to
//     the tail receiving its last message. tail_p99_vs_ack_p99_ratio is
//     the median of the rounds' p99 delivery over p99 ack;
//   - consumer groups keeping up: 4 members of a group consume while
//     producers write at half the peak (groupKeepsUp).

// readBenchConfig is what `orderlog bench --read` measures with.
type readBenchConfig struct {
	load      client.LoadConfig // the producers: streams, size, frame, in flight, duration
	rounds    int               // of range reads and of tail latency each
	readLimit uint32            // most messages a range read takes (0: up to C)
	serverPID int               // the server's process, for its CPU (0: not counted)
}

// rangeRound is one round of the range-read measurement.
type rangeRound struct {
	produce    client.LoadResult
	read       readResult
	readRate   float64 // msg/s
	produceCPU cpuUse  // while producing at the peak
	readCPU    cpuUse  // while reading
}

// cpuUse is the CPU the server and this process (the load generator or
// the reader) used over a phase. On a shared machine a message's CPU
// moves far less than the rate a phase gets.
type cpuUse struct{ server, self time.Duration }

// cpuMeter reads the CPU used so far; server stays 0 without a pid (or
// off Linux).
type cpuMeter struct{ serverPID int }

func (m cpuMeter) now() cpuUse {
	u := cpuUse{self: proccpu.Self()}
	if m.serverPID > 0 {
		u.server, _ = proccpu.Process(m.serverPID)
	}
	return u
}

func (u cpuUse) since(start cpuUse) cpuUse {
	return cpuUse{u.server - start.server, u.self - start.self}
}

// perMessage is µs of CPU, server and this process together, per message.
func (u cpuUse) perMessage(messages int) float64 {
	return float64((u.server + u.self).Microseconds()) / float64(max(messages, 1))
}

// readResult is one range read.
type readResult struct {
	messages, bytes int
	elapsed         time.Duration
}

func (r readResult) rate() float64 { return float64(r.messages) / r.elapsed.Seconds() }

// tailRound is one round of the tail measurement at a fixed rate.
type tailRound struct {
	asked     float64 // msg/s
	frames    int
	ack       client.LoadResult // per frame, send to ack
	delivered client.LoadResult // per frame, send to the tail receiving it
	afterAck  client.LoadResult // per frame, ack to the tail receiving it (0 when before)
}

func (r tailRound) ratio() float64 {
	return float64(r.delivered.Percentile(0.99)) / float64(r.ack.Percentile(0.99))
}

// runReadBench runs the read benchmark against the node dial reaches and
// prints it.
func runReadBench(ctx context.Context, dial func() (*client.Client, error), cfg readBenchConfig) error {
	producers, err := dial()
	if err != nil {
		return err
	}
	defer producers.Close()
	// The consumer has a connection of its own, as a reading process has.
	consumer, err := dial()
	if err != nil {
		return err
	}
	defer consumer.Close()
	if err := producers.WaitReady(ctx); err != nil {
		return err
	}
	warm := cfg.load
	warm.Duration = time.Second
	if _, err := client.RunLoad(ctx, producers, warm); err != nil { // ledgers open, reservations made
		return err
	}
	// The read side warms up as the produce side just did: the consumer's
	// page buffers and the node's mappings and caches are made by a read
	// of the warm-up's messages, not inside the first measured round.
	if _, err := rangeRead(ctx, consumer, cfg.readLimit); err != nil {
		return err
	}
	ranges, err := rangeRounds(ctx, producers, consumer, cfg)
	if err != nil {
		return err
	}
	peak := median(collect(ranges, func(r rangeRound) float64 { return r.produce.MessagesPerSecond() }))
	paced := cfg.load
	paced.Rate = peak / 2
	tails, err := tailRounds(ctx, producers, consumer, paced, cfg.rounds)
	if err != nil {
		return err
	}
	keepsUp, err := groupKeepsUp(ctx, dial, producers, paced)
	if err != nil {
		return err
	}
	printReadBench(ranges, tails, peak, keepsUp)
	return nil
}

// rangeRounds alternates a peak produce and a range read from offset 0.
func rangeRounds(ctx context.Context, producers, consumer *client.Client, cfg readBenchConfig) ([]rangeRound, error) {
	var rounds []rangeRound
	meter := cpuMeter{serverPID: cfg.serverPID}
	for r := range cfg.rounds {
		start := meter.now()
		produce, err := client.RunLoad(ctx, producers, cfg.load)
		if err != nil {
			return nil, err
		}
		produced := meter.now()
		read, err := rangeRead(ctx, consumer, cfg.readLimit)
		if err != nil {
			return nil, err
		}
		round := rangeRound{produce: produce, read: read, readRate: read.rate(),
			produceCPU: produced.since(start), readCPU: meter.now().since(produced)}
		fmt.Printf("round %d: produce %.0f msg/s (ack p99 %.2f ms, %.2f µs CPU/msg); read %d messages from offset 0 in %s: %.0f msg/s, %.1f MB/s (%.2f µs CPU/msg); ratio %.2f\n",
			r, produce.MessagesPerSecond(), ms(produce.Percentile(0.99)), round.produceCPU.perMessage(produce.Messages),
			read.messages, read.elapsed.Round(time.Millisecond), round.readRate, float64(read.bytes)/read.elapsed.Seconds()/1e6,
			round.readCPU.perMessage(read.messages), round.readRate/produce.MessagesPerSecond())
		rounds = append(rounds, round)
	}
	return rounds, nil
}

// rangeRead reads from offset 0 up to the committed watermark, at most
// limit messages (0: no limit; one Read call takes at most
// reader.MaxReadLimit, so a larger limit takes several in a row), and
// counts what arrived.
func rangeRead(ctx context.Context, c *client.Client, limit uint32) (readResult, error) {
	var res readResult
	from, left := uint64(0), limit
	start := time.Now()
	for {
		call := left
		if limit > 0 {
			call = min(left, reader.MaxReadLimit)
		}
		got := 0
		err := c.ReadBorrowed(ctx, from, call, func(page *client.Page) error {
			got += len(page.Messages)
			for _, m := range page.Messages {
				res.bytes += len(m.Message.GetValue())
			}
			from = page.NextOffset
			return nil
		})
		res.messages += got
		if err != nil {
			return res, err
		}
		left -= uint32(got)
		if limit == 0 || left == 0 || got < int(call) {
			break
		}
	}
	res.elapsed = time.Since(start)
	if res.messages == 0 {
		return res, errors.New("bench: the range read found no message")
	}
	return res, nil
}

// tailRounds measures delivery to a tailing consumer under a paced load.
func tailRounds(ctx context.Context, producers, consumer *client.Client, load client.LoadConfig, rounds int) ([]tailRound, error) {
	var out []tailRound
	for r := range rounds {
		round, err := measureTail(ctx, producers, consumer, load)
		if err != nil {
			return nil, err
		}
		fmt.Printf("tail round %d: %d frames at %.0f msg/s asked: ack p50 %.2f ms, p99 %.2f ms; delivered p50 %.2f ms, p99 %.2f ms (after the ack: p99 %.2f ms); ratio %.2f\n",
			r, round.frames, round.asked, ms(round.ack.Percentile(0.5)), ms(round.ack.Percentile(0.99)),
			ms(round.delivered.Percentile(0.5)), ms(round.delivered.Percentile(0.99)), ms(round.afterAck.Percentile(0.99)), round.ratio())
		out = append(out, round)
	}
	return out, nil
}

// measureTail starts a tail at the committed watermark, runs the paced
// load, waits for the tail to deliver every acknowledged frame and pairs
// each frame's send, ack and delivery.
func measureTail(ctx context.Context, producers, consumer *client.Client, load client.LoadConfig) (tailRound, error) {
	status, err := consumer.Status(ctx)
	if err != nil {
		return tailRound{}, err
	}
	tail := startTail(ctx, consumer, status.Committed)
	defer tail.stop()
	frames, err := runPacedLoad(ctx, producers, load)
	if err != nil {
		return tailRound{}, err
	}
	var last uint64
	for _, f := range frames {
		last = max(last, f.last)
	}
	if err := tail.waitPast(ctx, last, 30*time.Second); err != nil {
		return tailRound{}, err
	}
	round := tailRound{asked: load.Rate, frames: len(frames)}
	for _, f := range frames {
		at, ok := tail.arrival(f.last)
		if !ok {
			return tailRound{}, fmt.Errorf("bench: the tail never delivered offset %d", f.last)
		}
		round.ack.Latencies = append(round.ack.Latencies, f.acked.Sub(f.sent))
		round.delivered.Latencies = append(round.delivered.Latencies, at.Sub(f.sent))
		round.afterAck.Latencies = append(round.afterAck.Latencies, max(at.Sub(f.acked), 0))
	}
	return round, nil
}

// frameTiming is one frame of a paced load: when it was sent and
// acknowledged, and the offset of its last message.
type frameTiming struct {
	sent, acked time.Time
	last        uint64
}

// runPacedLoad runs cfg (paced at cfg.Rate over all streams, for
// cfg.Duration) as client.RunLoad does and records every frame's timing.
func runPacedLoad(ctx context.Context, c *client.Client, cfg client.LoadConfig) ([]frameTiming, error) {
	interval := time.Duration(float64(time.Second) * float64(cfg.Frame*cfg.Streams) / cfg.Rate)
	payload := make([]byte, cfg.Size)
	for i := range payload {
		payload[i] = byte('a' + i%26)
	}
	var mu sync.Mutex
	var all []frameTiming
	errs := make([]error, cfg.Streams)
	var wg sync.WaitGroup
	start := time.Now()
	for s := range cfg.Streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("readbench-%d-%d", start.UnixNano(), s)
			phase := interval * time.Duration(s) / time.Duration(cfg.Streams) // streams spread over one interval
			frames, err := pacedStream(ctx, c, name, payload, cfg, start.Add(phase), interval)
			mu.Lock()
			all = append(all, frames...)
			mu.Unlock()
			errs[s] = err
		}()
	}
	wg.Wait()
	return all, errors.Join(errs...)
}

// pacedStream is one producer of runPacedLoad: a frame every interval from
// first on, until cfg.Duration after first.
func pacedStream(ctx context.Context, c *client.Client, name string, payload []byte, cfg client.LoadConfig,
	first time.Time, interval time.Duration) ([]frameTiming, error) {
	producer, err := c.NewProducer(ctx, name, client.ProducerOptions{MaxInFlight: cfg.InFlight})
	if err != nil {
		return nil, err
	}
	defer producer.Close()
	messages := make([]*orderlogpb.Message, cfg.Frame)
	for i := range messages {
		messages[i] = &orderlogpb.Message{Topic: "bench", Value: payload}
	}
	type sent struct {
		pending *client.Pending
		at      time.Time
	}
	window := make(chan sent, cfg.InFlight)
	var frames []frameTiming
	waitErr := make(chan error, 1)
	go func() {
		var err error
		for s := range window {
			if err != nil {
				continue // drain: Send never blocks on the window
			}
			var acks []*orderlogpb.Ack
			if acks, err = s.pending.Wait(ctx); err == nil {
				frames = append(frames, frameTiming{sent: s.at, acked: time.Now(), last: lastOffset(acks)})
			}
		}
		waitErr <- err
	}()
	end := first.Add(cfg.Duration)
	for next := first; next.Before(end); next = next.Add(interval) {
		time.Sleep(time.Until(next))
		at := time.Now()
		pending, err := producer.Send(ctx, messages...)
		if err != nil {
			close(window)
			<-waitErr
			return frames, err
		}
		window <- sent{pending, at}
	}
	close(window)
	return frames, <-waitErr
}

func lastOffset(acks []*orderlogpb.Ack) uint64 {
	var last uint64
	for _, a := range acks {
		last = max(last, a.Offset)
	}
	return last
}

// tailWatch is a consumer tailing the log from `from`, noting when each
// offset arrived.
type tailWatch struct {
	from   uint64
	cancel context.CancelFunc
	done   chan error
	mu     struct {
		sync.Mutex
		arrived []int64 // arrived[i]: Unix nanoseconds offset from+i arrived (0: not yet)
		next    uint64  // the tail's next offset
	}
}

func startTail(ctx context.Context, c *client.Client, from uint64) *tailWatch {
	t := &tailWatch{from: from, done: make(chan error, 1)}
	t.mu.next = from
	ctx, t.cancel = context.WithCancel(ctx)
	go func() {
		t.done <- c.Tail(ctx, from, t.note)
	}()
	return t
}

func (t *tailWatch) note(page *client.Page) error {
	now := time.Now().UnixNano()
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, m := range page.Messages {
		i := int(m.Offset - t.from)
		for len(t.mu.arrived) <= i {
			t.mu.arrived = append(t.mu.arrived, 0)
		}
		t.mu.arrived[i] = now
	}
	t.mu.next = max(t.mu.next, page.NextOffset)
	return nil
}

// waitPast waits until the tail has passed offset, or fails after timeout.
func (t *tailWatch) waitPast(ctx context.Context, offset uint64, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		t.mu.Lock()
		next := t.mu.next
		t.mu.Unlock()
		switch {
		case next > offset:
			return nil
		case time.Now().After(deadline):
			return fmt.Errorf("bench: the tail reached offset %d in %s, not %d", next, timeout, offset+1)
		}
		select {
		case err := <-t.done:
			return fmt.Errorf("bench: the tail ended at offset %d: %w", next, err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// arrival is when offset arrived at the tail.
func (t *tailWatch) arrival(offset uint64) (time.Time, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	i := int(offset - t.from)
	if offset < t.from || i >= len(t.mu.arrived) || t.mu.arrived[i] == 0 {
		return time.Time{}, false
	}
	return time.Unix(0, t.mu.arrived[i]), true
}

func (t *tailWatch) stop() {
	t.cancel()
	<-t.done
}

// groupMembers is how many members consume in the group measurement.
const groupMembers = 4

// groupKeepsUp measures the third figure: groupMembers members of a new
// consumer group (each with a connection of its own, as separate
// processes have) consume topic "bench" while producers write it at half
// the peak with keys spread over its partitions. They keep up when every
// message produced is consumed within catchUp of the producers' end.
func groupKeepsUp(ctx context.Context, dial func() (*client.Client, error), producers *client.Client, load client.LoadConfig) (string, error) {
	const catchUp = 2 * time.Second
	group := fmt.Sprintf("bench-read-%d", time.Now().UnixNano())
	gctx, stop := context.WithCancel(ctx)
	defer stop()
	var (
		mu       sync.Mutex
		consumed = map[uint64]bool{}
		last     time.Time
		wg       sync.WaitGroup
		members  []*client.GroupMember
	)
	for i := range groupMembers {
		c, err := dial()
		if err != nil {
			return "", err
		}
		defer c.Close()
		m, err := c.JoinGroup(ctx, client.GroupOptions{Group: group, Topics: []string{"bench"}, Start: "latest",
			ClientName: fmt.Sprintf("member-%d", i)})
		if err != nil {
			return "", err
		}
		members = append(members, m)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				b, err := m.Poll(gctx)
				if err != nil {
					return
				}
				mu.Lock()
				for _, gm := range b.Messages {
					consumed[gm.Offset] = true
				}
				last = time.Now()
				mu.Unlock()
				m.MarkProcessed(b.Messages...)
			}
		}()
	}
	defer func() {
		stop()
		wg.Wait()
		for _, m := range members {
			closeCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = m.Close(closeCtx)
			cancel()
		}
	}()
	// every member holds its share before the producers start
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		gen, held := members[0].Assignment().Generation, 0
		for _, m := range members {
			if a := m.Assignment(); a.Generation == gen {
				held += len(a.Partitions)
			}
		}
		if gen > 0 && held == 16 {
			break
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("group members: no stable assignment of the 16 partitions in 30 s")
		}
	}
	load.Keys = 64
	res, err := client.RunLoad(ctx, producers, load)
	if err != nil {
		return "", err
	}
	ended := time.Now()
	for {
		mu.Lock()
		n, at := len(consumed), last
		mu.Unlock()
		if n >= res.Messages {
			lag := max(at.Sub(ended), 0)
			verdict := "yes"
			if lag > catchUp {
				verdict = "no"
			}
			return fmt.Sprintf("%s (%d members consumed all %d messages produced at %.0f msg/s; the last %v after the producers stopped, limit %v)",
				verdict, groupMembers, res.Messages, res.MessagesPerSecond(), lag.Round(time.Millisecond), catchUp), nil
		}
		if time.Since(ended) > 30*time.Second {
			return fmt.Sprintf("no (%d members consumed %d of %d messages in 30 s after the producers stopped)", groupMembers, n, res.Messages), nil
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// printReadBench prints the summary, one key=value per line.
func printReadBench(ranges []rangeRound, tails []tailRound, peak float64, groupKeepsUp string) {
	n := len(ranges)
	read := median(collect(ranges, func(r rangeRound) float64 { return r.readRate }))
	mb := median(collect(ranges, func(r rangeRound) float64 { return float64(r.read.bytes) / r.read.elapsed.Seconds() / 1e6 }))
	ratio := median(collect(ranges, func(r rangeRound) float64 { return r.readRate / r.produce.MessagesPerSecond() }))
	fmt.Printf("produce_peak_msgs_per_s=%.0f (median of %d rounds)\n", peak, n)
	fmt.Printf("read_msgs_per_s=%.0f (median of %d rounds: Read from offset 0 through the Go client)\n", read, n)
	fmt.Printf("read_mb_per_s=%.1f\n", mb)
	fmt.Printf("read_vs_produce_ratio=%.2f (median of %d rounds' read over produce; goal >= 3)\n", ratio, n)
	who := "this process only: no --server-pid"
	if ranges[0].produceCPU.server > 0 {
		who = "server and this process"
	}
	fmt.Printf("produce_cpu_us_per_msg=%.2f (median of %d rounds, %s)\n",
		median(collect(ranges, func(r rangeRound) float64 { return r.produceCPU.perMessage(r.produce.Messages) })), n, who)
	fmt.Printf("read_cpu_us_per_msg=%.2f (median of %d rounds, %s)\n",
		median(collect(ranges, func(r rangeRound) float64 { return r.readCPU.perMessage(r.read.messages) })), n, who)
	fmt.Printf("read_vs_produce_cpu_ratio=%.2f (median of %d rounds' CPU per message produced over read: messages read for the CPU of one written)\n",
		median(collect(ranges, func(r rangeRound) float64 {
			return r.produceCPU.perMessage(r.produce.Messages) / r.readCPU.perMessage(r.read.messages)
		})), n)
	t := len(tails)
	asked := 0.0
	if t > 0 {
		asked = tails[0].asked
	}
	ackP99 := median(collect(tails, func(r tailRound) float64 { return ms(r.ack.Percentile(0.99)) }))
	fmt.Printf("ack_p99_ms=%.3f (median of %d rounds at %.0f msg/s, half the peak)\n", ackP99, t, asked)
	fmt.Printf("tail_p99_ms=%.3f (median of %d rounds: send to delivery to a tailing consumer)\n",
		median(collect(tails, func(r tailRound) float64 { return ms(r.delivered.Percentile(0.99)) })), t)
	fmt.Printf("tail_after_ack_p99_ms=%.3f (median of %d rounds: ack to delivery)\n",
		median(collect(tails, func(r tailRound) float64 { return ms(r.afterAck.Percentile(0.99)) })), t)
	fmt.Printf("tail_p99_vs_ack_p99_ratio=%.2f (median of %d rounds; goal <= 1.5)\n",
		median(collect(tails, tailRound.ratio)), t)
	fmt.Printf("group_keeps_up=%s\n", groupKeepsUp)
}

// median is the middle of xs (the upper one of an even count).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

func collect[T any](xs []T, f func(T) float64) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = f(x)
	}
	return out
}
