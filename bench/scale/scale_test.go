package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestSmoke runs every phase once with tiny durations against real
// processes: one dev, a cluster of one ingest process (with one and with
// four commit-map readers), the sequencer alone paced and saturated. It
// checks the run measured something in each (C passed some probes) and
// printed the closing lines, not the figures' size (the machine is
// shared). ORDERLOG_BINARY names a built orderlog to use instead of
// building one.
func TestSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real orderlog processes (~20 s)")
	}
	if _, err := os.Stat("/dev/shm"); err != nil {
		t.Skip("no /dev/shm")
	}
	cfg := config{binary: orderlogBinary(t), nodes: []int{1}, rounds: 1, duration: 700 * time.Millisecond, warmup: 300 * time.Millisecond,
		streams: 4, minStreams: 2, size: 1024, probeInterval: 10 * time.Millisecond, lagWait: 10 * time.Second, idle: 200 * time.Millisecond,
		fanoutNodes: 1, fanoutReaders: 4, tmpfs: "/dev/shm", devDir: t.TempDir(), curve: []float64{1000},
		saturate: saturateConfig{streams: 4, window: 8, count: 64, duration: 700 * time.Millisecond}}
	var out bytes.Buffer
	sum, err := run(context.Background(), cfg, &out)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	p := sum.phases[0]
	if p.msgsPerSec <= 0 || p.grantsPerSec <= 0 || p.msgsPerGrant <= 0 || p.lag.passed == 0 || p.commitBytesPerSec <= 0 {
		t.Errorf("N=1 measured nothing somewhere: %+v", p)
	}
	if len(sum.curve) != 1 || sum.curve[0].grantsPerSec <= 0 {
		t.Errorf("paced curve: %+v", sum.curve)
	}
	if !strings.Contains(out.String(), "commit_map_fanout:") || len(sum.fanouts) != 1 {
		t.Errorf("no commit_map_fanout line, or %d rounds' pairs", len(sum.fanouts))
	}
	if sum.dev.grantsPerSec <= 0 || sum.capacity.grantsPerSec <= 0 || sum.headroom <= 0 {
		t.Errorf("dev %+v, capacity %+v, headroom %v", sum.dev, sum.capacity, sum.headroom)
	}
	if !strings.Contains(out.String(), "sequencer_headroom_ratio=") {
		t.Error("no sequencer_headroom_ratio= line")
	}
}

// orderlogBinary is $ORDERLOG_BINARY, or orderlog built by the go that
// runs this test.
func orderlogBinary(t *testing.T) string {
	if b := os.Getenv("ORDERLOG_BINARY"); b != "" {
		return b
	}
	binary := filepath.Join(t.TempDir(), "orderlog")
	build := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", binary, "orderlog/cmd/orderlog")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return binary
}
