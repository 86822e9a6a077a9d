package main

import (
	"context"
	"os"
	"path/filepath"
	"time"

	"orderlog/client"
)

// devResult is what `orderlog dev` (every role in one process, W = A = 1)
// needed of its sequencer at its own peak.
type devResult struct {
	msgsPerSec     float64
	grantsPerSec   float64
	msgsPerGrant   float64
	walBytesPerMsg float64
}

// runDev starts `orderlog dev` with its data under root, warms it up and
// drives it as fast as load goes; the grants come from its /metrics.
func runDev(ctx context.Context, binary, root string, load client.LoadConfig, warmup time.Duration, extra []string) (devResult, error) {
	dir, err := os.MkdirTemp(root, "dev-")
	if err != nil {
		return devResult{}, err
	}
	defer os.RemoveAll(dir)
	p, err := startDev(ctx, binary, filepath.Join(dir, "data"), dir, extra)
	if addressInUse(err) && ctx.Err() == nil {
		p, err = startDev(ctx, binary, filepath.Join(dir, "data-retry"), dir, extra)
	}
	if err != nil {
		return devResult{}, err
	}
	defer p.stop()
	grpcAddr, httpAddr := p.grpcAddr, p.httpAddr
	c, err := client.Dial(grpcAddr)
	if err != nil {
		return devResult{}, err
	}
	defer c.Close()
	warm := load
	warm.Duration = warmup
	if _, err := client.RunLoad(ctx, c, warm); err != nil {
		return devResult{}, err
	}
	before, err := scrape(httpAddr)
	if err != nil {
		return devResult{}, err
	}
	t0 := time.Now()
	peak, err := client.RunLoad(ctx, c, load)
	if err != nil {
		return devResult{}, err
	}
	after, err := scrape(httpAddr)
	if err != nil {
		return devResult{}, err
	}
	secs := time.Since(t0).Seconds()
	grants := after["orderlog_ingest_grants_total"] - before["orderlog_ingest_grants_total"]
	logged := after["orderlog_ingest_logged_messages_total"] - before["orderlog_ingest_logged_messages_total"]
	r := devResult{msgsPerSec: peak.MessagesPerSecond(), grantsPerSec: grants / secs}
	if grants > 0 {
		r.msgsPerGrant = logged / grants
	}
	if logged > 0 {
		r.walBytesPerMsg = (after["orderlog_wal_written_bytes_total"] - before["orderlog_wal_written_bytes_total"]) / logged
	}
	return r, nil
}

// startDev starts `orderlog dev` with its data in data and its log in
// logDir, and returns once it is ready (stopped again if it is not).
func startDev(ctx context.Context, binary, data, logDir string, extra []string) (*proc, error) {
	grpcAddr, httpAddr, err := addrs()
	if err != nil {
		return nil, err
	}
	etcdAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	args := append([]string{"dev", "--data", data, "--grpc-addr", grpcAddr, "--http-addr", httpAddr,
		"--etcd-addr", etcdAddr, "--archive", "none"}, extra...)
	p, err := startProc(binary, logDir, "dev", grpcAddr, httpAddr, args...)
	if err != nil {
		return nil, err
	}
	ready, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := p.waitReady(ready); err != nil {
		p.stop()
		return nil, err
	}
	return p, nil
}
