package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"orderlog/client"
	"orderlog/internal/apierr"
	"orderlog/proto/orderlogpb"
)

// round is one restart of `orderlog dev` at a size and what followed it.
type round struct {
	stop        time.Duration // SIGTERM to exit
	restart     time.Duration // exec to /readyz 200
	failover    takeoverLog   // the new leader's takeover, from its log
	takeover    time.Duration // InitProducer of an existing producer to its first ack
	rebuild     time.Duration // the node's own takeover of it, as logged
	readerReady time.Duration // exec of a fresh `orderlog reader` to its /readyz 200
}

// restartRound stops the running dev, starts it again on the same data,
// and measures the restart, the sequencer's takeover, a producer's
// takeover and a fresh reader's start. It returns the new dev.
func (b *bench) restartRound(running *dev, r int, producer string) (*dev, round, error) {
	var out round
	out.stop = running.stop()
	b.devRuns++
	next, err := startDev(b.devCfg, b.devRuns)
	if err != nil {
		return nil, out, err
	}
	b.current = next
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	readyAt, err := waitReadyz(ctx, b.devCfg.addrs.http)
	if err != nil {
		return next, out, fmt.Errorf("restarted dev (log %s): %w", next.logPath, err)
	}
	out.restart = readyAt.Sub(next.started)
	if out.failover, err = next.readTakeover(); err != nil {
		return next, out, err
	}
	if out.takeover, err = b.producerTakeover(ctx, producer); err != nil {
		return next, out, err
	}
	if out.rebuild, err = next.readProducerTakeover(producer); err != nil {
		return next, out, err
	}
	out.readerReady, err = b.freshReader(ctx, r)
	return next, out, err
}

// producerTakeover times NewProducer (InitProducer) of a producer the
// previous dev run owned, then its first frame, to the first ack: the
// node must take it over, rebuilding its state from the ledgers since its
// state_ledger, before it accepts the frame.
func (b *bench) producerTakeover(ctx context.Context, name string) (time.Duration, error) {
	c, err := client.Dial(b.devCfg.addrs.grpc)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	start := time.Now()
	p, err := c.NewProducer(ctx, name, client.ProducerOptions{})
	if err != nil {
		return 0, fmt.Errorf("takeover of %s: %w", name, err)
	}
	defer p.Close()
	if _, err := p.Produce(ctx, &orderlogpb.Message{Topic: "longrun", Value: make([]byte, b.load.size)}); err != nil {
		return 0, fmt.Errorf("takeover of %s: first frame: %w", name, err)
	}
	return time.Since(start), nil
}

// freshReader starts an `orderlog reader` process against the dev's etcd
// and times it to /readyz 200 (it has applied the leader's first
// watermark), then reads one message at the log start through it, so
// that a reader that is "ready" but cannot serve is caught.
func (b *bench) freshReader(ctx context.Context, r int) (time.Duration, error) {
	logPath := filepath.Join(b.logDir, fmt.Sprintf("reader-%02d-%d.log", b.devRuns, r))
	rd, err := startReader(b.devCfg.binary, b.devCfg.addrs.etcd, logPath)
	if err != nil {
		return 0, err
	}
	defer rd.stop()
	readyAt, err := waitReadyz(ctx, rd.http)
	if err != nil {
		return 0, fmt.Errorf("fresh reader (log %s): %w", logPath, err)
	}
	took := readyAt.Sub(rd.startedAt)
	from := uint64(scrapeMetrics(b.devCfg.addrs.http, "orderlog_log_start")["orderlog_log_start"])
	first, err := readOne(ctx, rd.grpc, from)
	if err != nil {
		return took, fmt.Errorf("fresh reader (log %s): read at the log start %d: %w", logPath, from, err)
	}
	fmt.Printf("    fresh reader: ready in %s, read offset %d through it; %s\n", ms(took), first,
		metricsLine(scrapeMetrics(rd.http, readerMetrics...), readerMetrics))
	return took, nil
}

// readOne reads the first message at or after from and returns its
// offset.
func readOne(ctx context.Context, addr string, from uint64) (uint64, error) {
	c, err := client.Dial(addr)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	found := false
	var offset uint64
	err = c.Read(ctx, from, 1, func(p *client.Page) error {
		if len(p.Messages) > 0 && !found {
			found, offset = true, p.Messages[0].Offset
		}
		return nil
	})
	if err == nil && !found {
		err = errors.New("no message")
	}
	return offset, err
}

// belowStartCheck reads offset 0 once the log start moved past it and
// says whether the answer was OFFSET_OUT_OF_RANGE naming the start.
func belowStartCheck(ctx context.Context, addr string, logStart uint64) (ok bool, detail string) {
	if logStart == 0 {
		return true, "skipped: the log start is still 0 (the history is under -retention-bytes)"
	}
	c, err := client.Dial(addr)
	if err != nil {
		return false, err.Error()
	}
	defer c.Close()
	err = c.Read(ctx, 0, 1, func(*client.Page) error { return nil })
	apiErr := apierr.As(err)
	switch {
	case err == nil:
		return false, fmt.Sprintf("read at offset 0 succeeded, log start %d", logStart)
	case apiErr == nil || apiErr.Code != apierr.OffsetOutOfRange:
		return false, fmt.Sprintf("read at offset 0: %v (want OFFSET_OUT_OF_RANGE)", err)
	case !strings.Contains(apiErr.Message, "log start"):
		return false, fmt.Sprintf("OFFSET_OUT_OF_RANGE without the log start: %v", err)
	}
	return true, fmt.Sprintf("read at offset 0: %v (log start metric %d)", err, logStart)
}

func ms(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d.Microseconds())/1000) }
