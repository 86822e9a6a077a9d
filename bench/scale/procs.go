package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// proc is one orderlog process this benchmark started; its stdout and
// stderr go to logPath.
type proc struct {
	name     string
	cmd      *exec.Cmd
	grpcAddr string
	httpAddr string
	logPath  string
	exited   chan struct{}
}

// startProc starts `binary args...` with the addresses it was given;
// logDir keeps its output.
func startProc(binary, logDir, name, grpcAddr, httpAddr string, args ...string) (*proc, error) {
	logPath := filepath.Join(logDir, name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logFile.Close() // the child keeps its own descriptor
	cmd := exec.Command(binary, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	dieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, grpcAddr: grpcAddr, httpAddr: httpAddr, logPath: logPath, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.exited) }()
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// stop sends SIGTERM and waits, then SIGKILL after 20 s: a benchmark must
// leave no process behind.
func (p *proc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(20 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// waitReady polls the process's GET /readyz until it answers 200.
func (p *proc) waitReady(ctx context.Context) error {
	var last string
	for {
		select {
		case <-p.exited:
			return fmt.Errorf("%s exited while starting; its log (%s) ends:\n%s", p.name, p.logPath, tail(p.logPath))
		default:
		}
		resp, err := httpClient.Get("http://" + p.httpAddr + "/readyz")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = strings.TrimSpace(string(body))
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready: %w (last: %s); its log (%s) ends:\n%s", p.name, ctx.Err(), last, p.logPath, tail(p.logPath))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// tail is the end of a log file, for error messages.
func tail(path string) string {
	data, _ := os.ReadFile(path)
	if len(data) > 2000 {
		data = data[len(data)-2000:]
	}
	return string(data)
}

// addrs are a role process's gRPC and HTTP addresses.
func addrs() (grpcAddr, httpAddr string, err error) {
	if grpcAddr, err = freeAddr(); err != nil {
		return "", "", err
	}
	httpAddr, err = freeAddr()
	return grpcAddr, httpAddr, err
}
