package benchutil

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"orderlog/client"
)

// Dev is an `orderlog dev` process a benchmark started, ready, with a
// client on it.
type Dev struct {
	Cmd      *exec.Cmd
	GRPCAddr string
	HTTPAddr string
	Client   *client.Client
}

// StartDev starts `binary dev` with its data in dataDir, on free ports and
// without an archive, extra flags after those (the last of a repeated flag
// wins), its log to stderr (nil: discarded); it returns once the node is
// ready.
func StartDev(binary, dataDir string, stderr io.Writer, extra ...string) (*Dev, error) {
	args := []string{"dev", "--data", dataDir, "--grpc-addr", "127.0.0.1:0",
		"--http-addr", "127.0.0.1:0", "--etcd-addr", "127.0.0.1:0", "--archive", "none"}
	cmd := exec.Command(binary, append(args, extra...)...)
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	d := &Dev{Cmd: cmd}
	if d.GRPCAddr, d.HTTPAddr, err = ReadAddrs(stdout); err != nil {
		d.Stop()
		return nil, err
	}
	if d.Client, err = client.Dial(d.GRPCAddr); err != nil {
		d.Stop()
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := d.Client.WaitReady(ctx); err != nil {
		d.Stop()
		return nil, err
	}
	return d, nil
}

// Stop closes the client and stops the process as an operator would.
func (d *Dev) Stop() {
	if d.Client != nil {
		d.Client.Close()
	}
	_ = d.Cmd.Process.Signal(syscall.SIGTERM)
	_ = d.Cmd.Wait()
}

// ReadAddrs reads `orderlog dev`'s banner for the gRPC and HTTP addresses
// it got, then keeps draining its output in the background.
func ReadAddrs(stdout io.Reader) (grpcAddr, httpAddr string, err error) {
	scanner := bufio.NewScanner(stdout)
	for scanner.Scan() {
		line := strings.TrimSpace(scanner.Text())
		if addr, ok := strings.CutPrefix(line, "gRPC "); ok {
			grpcAddr = strings.TrimSpace(addr)
		}
		if addr, ok := strings.CutPrefix(line, "HTTP "); ok {
			httpAddr = strings.TrimPrefix(strings.TrimSpace(addr), "http://")
		}
		if grpcAddr != "" && httpAddr != "" {
			go func() {
				for scanner.Scan() {
				}
			}()
			return grpcAddr, httpAddr, nil
		}
	}
	return "", "", errors.New("orderlog dev exited before printing its gRPC and HTTP addresses")
}
