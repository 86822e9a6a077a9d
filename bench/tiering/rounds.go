package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"orderlog/bench/internal/benchutil"
	"orderlog/internal/keys"
	"orderlog/tiering"
)

// tieringRounds runs step 4 cfg.tieringRounds times on the same data and
// keeps the median rate. Before every round but the first, the archive is
// forgotten: a dev without an archive (no worker) deletes the tiering head
// and plan from etcd, and the archive directory is removed, so that the
// next worker starts again at the log start, 0, as the first did.
func (r *results) tieringRounds(ctx context.Context, cfg config, archiveURL string) {
	var rates, seconds, cpu []float64
	for round := range max(cfg.tieringRounds, 1) {
		if round > 0 {
			check(forgetArchive(ctx, cfg, round))
		}
		flags := []string{"--archive", archiveURL, "--archive-file-bytes", "512MiB", "--archive-file-age", "1s", "--archive-hot-window", "1h"}
		profile := cfg.cpuProfile != "" && round == 0
		if profile {
			flags = append(flags, "--pprof")
		}
		start := time.Now()
		d, err := startDevRetry(cfg, fmt.Sprintf("2-tiering-%d", round), flags...)
		check(err)
		stopLater(d)
		fmt.Printf("tiering round %d: dev restarted with the archive, ready in %.1f s\n", round, time.Since(start).Seconds())
		var profiled chan error
		if profile {
			// Not /debug/pprof/trace: Go's tracer crashes the dev (SIGSEGV
			// unwinding frame pointers through arrow-go's assembly).
			profiled = make(chan error, 1)
			go func() { profiled <- saveCPUProfile(d.http, cfg.cpuProfile, cfg.profileSeconds) }()
		}
		r.watchTiering(d)
		if profiled != nil {
			check(<-profiled)
			fmt.Printf("tiering round %d: the dev's CPU profile of its first %d s in %s\n", round, cfg.profileSeconds, cfg.cpuProfile)
		}
		stop(d)
		rates, seconds, cpu = append(rates, r.tieringRate), append(seconds, r.tieringSeconds), append(cpu, r.tieringCPUPerRow)
	}
	r.tieringRate, r.tieringSeconds, r.tieringCPUPerRow = benchutil.Median(rates), benchutil.Median(seconds), benchutil.Median(cpu)
	if len(rates) > 1 {
		fmt.Printf("tiering: %d rounds, rows/s %.0f, median %.0f\n", len(rates), rates, r.tieringRate)
	}
}

// forgetArchive deletes the tiering head and plan (through a dev without
// an archive, so that no worker runs) and the archive directory.
func forgetArchive(ctx context.Context, cfg config, round int) error {
	d, err := startDevRetry(cfg, fmt.Sprintf("2-forget-%d", round), "--archive", "none")
	if err != nil {
		return err
	}
	defer d.stop()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + d.etcdAddr}, DialTimeout: 5 * time.Second})
	if err != nil {
		return err
	}
	defer cli.Close()
	if _, err := cli.Delete(ctx, keys.TieringHead); err != nil {
		return err
	}
	if _, err := cli.Delete(ctx, keys.TieringPlan); err != nil {
		return err
	}
	return os.RemoveAll(filepath.Clean(cfg.archive))
}

// saveCPUProfile saves the dev's CPU profile over the next seconds to path.
func saveCPUProfile(httpAddr, path string, seconds int) error {
	c := &http.Client{Timeout: time.Duration(seconds+30) * time.Second}
	resp, err := c.Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", httpAddr, seconds))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/debug/pprof/profile: %s", resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// startDevRetry starts a dev on cfg.data, up to three times: the free
// ports startDev picks can be taken by another process before the dev
// binds them (the machine is shared), and each round restarts a dev.
func startDevRetry(cfg config, name string, flags ...string) (*dev, error) {
	var err error
	for attempt := range 3 {
		var d *dev
		if d, err = startDev(cfg.binary, cfg.data, cfg.logs, fmt.Sprintf("%s-%d", name, attempt), flags...); err == nil {
			return d, nil
		}
		fmt.Printf("%s: %v; again\n", name, err)
	}
	return nil, err
}

// tieringHead reads the archive's head from a dev's etcd.
type tieringHead struct{ cli *clientv3.Client }

func headWatcher(d *dev) *tieringHead {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + d.etcdAddr}, DialTimeout: 5 * time.Second})
	check(err)
	return &tieringHead{cli: cli}
}

// read returns the head, or the zero head while there is none or etcd
// does not answer.
func (h *tieringHead) read() tiering.Head {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	head, err := tiering.ReadHead(ctx, h.cli)
	if err != nil {
		return tiering.Head{}
	}
	return head
}

func (h *tieringHead) close() { h.cli.Close() }
