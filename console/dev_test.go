package console_test

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// chromiumEnv names a Chromium binary to use instead of the one on PATH.
const chromiumEnv = "ORDERLOG_CHROMIUM"

// findChromium is the browser the test drives; without one the test is
// skipped, saying how to get it (`make test` installs it).
func findChromium(t *testing.T) string {
	t.Helper()
	if path := os.Getenv(chromiumEnv); path != "" {
		return path
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	t.Skipf("no Chromium on PATH (nor %s): `make chromium-tool` installs Debian's chromium; `make test` does it first", chromiumEnv)
	return ""
}

// buildOrderlog builds the binary under test into a temporary directory.
func buildOrderlog(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "orderlog")
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	out, err := exec.Command(gobin, "build", "-o", bin, "orderlog/cmd/orderlog").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// devProcess is a real `orderlog dev` with its data directory and ports,
// started again on the same ones after a kill.
type devProcess struct {
	bin, dataDir, grpcAddr, httpAddr string
	log                              *os.File
	cmd                              *exec.Cmd
}

func startDev(t *testing.T, bin string) *devProcess {
	t.Helper()
	dir := t.TempDir()
	log, err := os.Create(filepath.Join(dir, "dev.log"))
	if err != nil {
		t.Fatal(err)
	}
	d := &devProcess{bin: bin, dataDir: filepath.Join(dir, "data"), grpcAddr: freeAddr(t), httpAddr: freeAddr(t), log: log}
	t.Cleanup(func() {
		d.stop()
		log.Close()
		if t.Failed() {
			text, _ := os.ReadFile(log.Name())
			t.Logf("orderlog dev log:\n%s", tail(string(text), 4000))
		}
	})
	d.start(t)
	return d
}

func (d *devProcess) start(t *testing.T) {
	t.Helper()
	d.cmd = exec.Command(d.bin, "dev", "--data", d.dataDir, "--grpc-addr", d.grpcAddr, "--http-addr", d.httpAddr,
		"--etcd-addr", "127.0.0.1:0", "--archive", "none")
	d.cmd.Stdout, d.cmd.Stderr = d.log, d.log
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get(d.url("/readyz")); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("orderlog dev not ready within 30 s")
}

// kill9 kills the process the hard way, as a crash would.
func (d *devProcess) kill9(t *testing.T) {
	t.Helper()
	if err := d.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = d.cmd.Wait()
}

func (d *devProcess) stop() {
	if d.cmd != nil && d.cmd.ProcessState == nil {
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = d.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = d.cmd.Process.Kill()
			<-done
		}
	}
}

func (d *devProcess) url(path string) string { return "http://" + d.httpAddr + path }

// produce posts one message and returns its offset.
func (d *devProcess) produce(t *testing.T, body string) uint64 {
	t.Helper()
	var ack struct {
		Offset *uint64 `json:"offset"`
	}
	d.post(t, "/v1/messages", body, &ack)
	if ack.Offset == nil {
		t.Fatalf("produce %s: no offset", body)
	}
	return *ack.Offset
}

// committed is the node's committed watermark C.
func (d *devProcess) committed(t *testing.T) uint64 {
	t.Helper()
	resp, err := http.Get(d.url("/v1/status"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st struct {
		Committed uint64 `json:"committed"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	return st.Committed
}

func (d *devProcess) post(t *testing.T, path, body string, into any) {
	t.Helper()
	resp, err := http.Post(d.url(path), "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	text, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		t.Fatalf("POST %s %s: %s %s", path, body, resp.Status, text)
	}
	if into != nil {
		if err := json.Unmarshal(text, into); err != nil {
			t.Fatalf("POST %s: %v in %s", path, err, text)
		}
	}
}

// freeAddr is a loopback address nothing listens on, below the kernel's
// ephemeral range (a port taken with ":0" and closed can be handed to the
// next outgoing connection before the child binds it).
func freeAddr(t *testing.T) string {
	t.Helper()
	for range 1000 {
		port := 20000 + rand.IntN(12000)
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		l.Close()
		return l.Addr().String()
	}
	t.Fatal("no free loopback port")
	return ""
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}
