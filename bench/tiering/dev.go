package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"orderlog/client"
)

// dev is one run of `orderlog dev` on fixed loopback addresses; its
// output (the logs) goes to a file in the work directory.
type dev struct {
	cmd                  *exec.Cmd
	grpc, http, etcdAddr string
	logPath              string
	client               *client.Client
}

// startDev starts `orderlog dev` on dataDir with flags and waits for
// /readyz; name numbers its log file.
func startDev(binary, dataDir, logDir, name string, flags ...string) (*dev, error) {
	d := &dev{grpc: freeAddr(), http: freeAddr(), etcdAddr: freeAddr(), logPath: filepath.Join(logDir, name+".log")}
	logFile, err := os.Create(d.logPath)
	if err != nil {
		return nil, err
	}
	defer logFile.Close() // the child keeps its own descriptor
	args := append([]string{"dev", "--data", dataDir, "--grpc-addr", d.grpc, "--http-addr", d.http,
		"--etcd-addr", d.etcdAddr}, flags...)
	d.cmd = exec.Command(binary, args...)
	d.cmd.Stdout, d.cmd.Stderr = logFile, logFile
	if err := d.cmd.Start(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := waitReadyz(ctx, d.http); err != nil {
		d.stop()
		return nil, fmt.Errorf("%s (log %s): %w", name, d.logPath, err)
	}
	if d.client, err = client.Dial(d.grpc); err != nil {
		d.stop()
		return nil, err
	}
	return d, nil
}

// stop closes the client and sends SIGTERM (SIGKILL after a minute).
func (d *dev) stop() {
	if d.client != nil {
		d.client.Close()
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = d.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		_ = d.cmd.Process.Kill()
		<-done
	}
}

// committed is the dev's committed watermark C.
func (d *dev) committed(ctx context.Context) (uint64, error) {
	st, err := d.client.Status(ctx)
	if err != nil {
		return 0, err
	}
	return st.Committed, nil
}

// metric is one unlabelled sample from the dev's /metrics (false: absent).
func (d *dev) metric(name string) (float64, bool) {
	values := scrapeMetrics(d.http, name)
	v, ok := values[name]
	return v, ok
}

func waitReadyz(ctx context.Context, addr string) error {
	httpClient := &http.Client{Timeout: time.Second}
	for {
		resp, err := httpClient.Get("http://" + addr + "/readyz")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s/readyz: not 200: %w (last: %v)", addr, ctx.Err(), err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// scrapeMetrics reads the unlabelled samples of the named metrics.
func scrapeMetrics(httpAddr string, names ...string) map[string]float64 {
	out := map[string]float64{}
	httpClient := &http.Client{Timeout: 5 * time.Second}
	resp, err := httpClient.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		return out
	}
	defer resp.Body.Close()
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	scanner := bufio.NewScanner(resp.Body)
	scanner.Buffer(make([]byte, 1<<20), 1<<20)
	for scanner.Scan() {
		name, value, ok := strings.Cut(scanner.Text(), " ")
		if !ok || !want[name] {
			continue
		}
		if v, err := strconv.ParseFloat(strings.TrimSpace(value), 64); err == nil {
			out[name] = v
		}
	}
	return out
}

func freeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	check(err)
	defer l.Close()
	return l.Addr().String()
}
