package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// devAddrs are the fixed loopback addresses of the `orderlog dev` under
// test: the same across its restarts, so clients and the fresh readers
// find it again.
type devAddrs struct{ grpc, http, etcd string }

func newDevAddrs() devAddrs {
	return devAddrs{grpc: freeAddr(), http: freeAddr(), etcd: freeAddr()}
}

// dev is one run of `orderlog dev`; its stderr (the logs) goes to logPath.
type dev struct {
	cmd     *exec.Cmd
	logPath string
	started time.Time
}

// devConfig is how every run of `orderlog dev` is started.
type devConfig struct {
	binary  string
	dataDir string
	logDir  string
	addrs   devAddrs
	flags   []string // retention, roll and any extra flags
}

// startDev starts `orderlog dev` on cfg's data directory and addresses;
// n numbers its log file.
func startDev(cfg devConfig, n int) (*dev, error) {
	logPath := filepath.Join(cfg.logDir, fmt.Sprintf("dev-%02d.log", n))
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logFile.Close() // the child keeps its own descriptor
	args := append([]string{"dev", "--data", cfg.dataDir, "--grpc-addr", cfg.addrs.grpc,
		"--http-addr", cfg.addrs.http, "--etcd-addr", cfg.addrs.etcd, "--archive", "none"}, cfg.flags...)
	cmd := exec.Command(cfg.binary, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	d := &dev{cmd: cmd, logPath: logPath, started: time.Now()}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return d, nil
}

// stop sends SIGTERM and waits for the process to end (SIGKILL after
// a minute); it returns how long the clean stop took.
func (d *dev) stop() time.Duration {
	start := time.Now()
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = d.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		fmt.Println("  orderlog dev did not stop within a minute of SIGTERM: SIGKILL")
		_ = d.cmd.Process.Kill()
		<-done
	}
	return time.Since(start)
}

// rssBytes is the process's resident set (VmRSS in /proc/PID/status).
func rssBytes(pid int) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kib, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kib << 10, err
		}
	}
	return 0, errors.New("no VmRSS line")
}

// waitReadyz polls GET /readyz at addr until it answers 200 and returns
// when it did.
func waitReadyz(ctx context.Context, addr string) (time.Time, error) {
	httpClient := &http.Client{Timeout: time.Second}
	for {
		resp, err := httpClient.Get("http://" + addr + "/readyz")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return time.Now(), nil
			}
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("%s/readyz: not 200: %w (last: %v)", addr, ctx.Err(), err)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// takeoverLog is what a started `orderlog dev` logged about its
// sequencer's takeover.
type takeoverLog struct {
	took          time.Duration // `sequencer leader elected ... took=`
	replay        time.Duration // `sequencer takeover steps ... replay=`
	olderLedgers  time.Duration // `... older_ledgers=`
	commitLedgers string        // `... commit_ledgers=`
	entriesRead   string        // `... entries_read=`
	checkpoint    string        // `... checkpoint=` (the ledger started from; 0: none)
}

var logField = regexp.MustCompile(`(\w+)=("[^"]*"|\S+)`)

// fields are a slog text line's key=value pairs.
func fields(line string) map[string]string {
	out := map[string]string{}
	for _, m := range logField.FindAllStringSubmatch(line, -1) {
		out[m[1]] = strings.Trim(m[2], `"`)
	}
	return out
}

// readTakeover waits up to 5 s for the dev's log to hold its leader's
// `sequencer leader elected` line and reads it with the steps line.
func (d *dev) readTakeover() (takeoverLog, error) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		t, found, err := scanTakeover(d.logPath)
		if err != nil || found || time.Now().After(deadline) {
			if err == nil && !found {
				err = fmt.Errorf("%s: no `sequencer leader elected` line", d.logPath)
			}
			return t, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func scanTakeover(path string) (t takeoverLog, found bool, err error) {
	f, err := os.Open(path)
	if err != nil {
		return t, false, err
	}
	defer f.Close()
	scanner := bufio.NewScanner(f)
	scanner.Buffer(make([]byte, 1<<20), 1<<20)
	for scanner.Scan() {
		line := scanner.Text()
		switch {
		case strings.Contains(line, `msg="sequencer takeover steps"`):
			kv := fields(line)
			t.replay, _ = time.ParseDuration(kv["replay"])
			t.olderLedgers, _ = time.ParseDuration(kv["older_ledgers"])
			t.commitLedgers, t.entriesRead, t.checkpoint = kv["commit_ledgers"], kv["entries_read"], kv["checkpoint"]
		case strings.Contains(line, `msg="sequencer leader elected"`):
			t.took, err = time.ParseDuration(fields(line)["took"])
			found = err == nil
		}
	}
	return t, found, scanner.Err()
}

// reader is a fresh `orderlog reader` process against the dev's etcd.
type reader struct {
	cmd       *exec.Cmd
	grpc      string
	http      string
	startedAt time.Time
}

var readerBanner = regexp.MustCompile(`serving gRPC on (\S+), HTTP on http://(\S+)`)

// startReader starts `orderlog reader` and reads its addresses from its
// banner; its logs go to logPath.
func startReader(binary, etcdAddr, logPath string) (*reader, error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	cmd := exec.Command(binary, "reader", "--etcd", "http://"+etcdAddr, "--grpc-addr", "127.0.0.1:0",
		"--http-addr", "127.0.0.1:0", "--name", "longrun-reader")
	cmd.Stderr = logFile
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	r := &reader{cmd: cmd, startedAt: time.Now()}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	scanner := bufio.NewScanner(stdout)
	for scanner.Scan() {
		if m := readerBanner.FindStringSubmatch(scanner.Text()); m != nil {
			r.grpc, r.http = m[1], m[2]
			go func() {
				for scanner.Scan() {
				}
			}()
			return r, nil
		}
	}
	_ = cmd.Wait()
	return nil, fmt.Errorf("orderlog reader exited before printing its addresses (log: %s)", logPath)
}

func (r *reader) stop() {
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = r.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = r.cmd.Process.Kill()
		<-done
	}
}

func freeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	check(err)
	defer l.Close()
	return l.Addr().String()
}

// readProducerTakeover waits up to 5 s for the dev's log line `producer
// taken over ... name=<name> took=`, the server's own rebuild of the
// producer (the client's figure adds InitProducer and the first frame's
// way through a node that has just started: its first ledger, its first
// grant).
func (d *dev) readProducerTakeover(name string) (time.Duration, error) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		data, err := os.ReadFile(d.logPath)
		if err != nil {
			return 0, err
		}
		for line := range strings.SplitSeq(string(data), "\n") {
			if kv := fields(line); strings.Contains(line, `msg="producer taken over"`) && kv["name"] == name {
				return time.ParseDuration(kv["took"])
			}
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("%s: no `producer taken over` line for %s", d.logPath, name)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
