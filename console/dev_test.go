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

// devProcess is a real `orderlog dev` with its data directory, archive
// directory and ports, started again on the same ones after a kill.
type devProcess struct {
	bin, dataDir, archiveDir, grpcAddr, httpAddr string
	log                                          *os.File
	cmd                                          *exec.Cmd
}

func startDev(t *testing.T, bin string) *devProcess {
	t.Helper()
	dir := t.TempDir()
	log, err := os.Create(filepath.Join(dir, "dev.log"))
	if err != nil {
		t.Fatal(err)
	}
	d := &devProcess{bin: bin, dataDir: filepath.Join(dir, "data"), archiveDir: filepath.Join(dir, "archive"),
		grpcAddr: freeAddr(t), httpAddr: freeAddr(t), log: log}
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

// start runs orderlog dev archiving to a local directory, a file as soon
// as its first message is a second old, so that the Archive page has
// files (and the hole a kill leaves) within the test.
func (d *devProcess) start(t *testing.T) {
	t.Helper()
	d.cmd = exec.Command(d.bin, "dev", "--data", d.dataDir, "--grpc-addr", d.grpcAddr, "--http-addr", d.httpAddr,
		"--etcd-addr", "127.0.0.1:0", "--archive", "file://"+d.archiveDir, "--archive-file-age", "1s")
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

// produceMany logs n small messages to topic, one request each (so that
// they are n entries of the log, not batched into a few).
func (d *devProcess) produceMany(t *testing.T, topic string, n int) {
	t.Helper()
	for i := range n {
		if code, text := d.postWith(t, "/v1/messages", fmt.Sprintf(`{"topic":%q,"payload":%d}`, topic, i), nil); code != http.StatusOK {
			t.Fatalf("produce %d to %s: %d %s", i, topic, code, text)
		}
	}
}

// session is a producer session: its id and epoch.
type session struct {
	ID    uint64 `json:"producer_id"`
	Epoch uint64 `json:"epoch"`
}

// initProducer opens (or bumps the epoch of) the producer called name.
func (d *devProcess) initProducer(t *testing.T, name string) session {
	t.Helper()
	var s session
	d.post(t, "/v1/producers", fmt.Sprintf(`{"name":%q}`, name), &s)
	return s
}

func (s session) headers(seq uint64) map[string]string {
	return map[string]string{"Producer-Id": fmt.Sprint(s.ID), "Producer-Epoch": fmt.Sprint(s.Epoch), "Producer-Seq": fmt.Sprint(seq)}
}

// produceAs logs one message of the session at seq and returns its offset.
func (d *devProcess) produceAs(t *testing.T, s session, seq uint64, body string) uint64 {
	t.Helper()
	code, text := d.postWith(t, "/v1/messages", body, s.headers(seq))
	var ack struct {
		Offset *uint64 `json:"offset"`
	}
	if err := json.Unmarshal(text, &ack); code != http.StatusOK || err != nil || ack.Offset == nil {
		t.Fatalf("produce seq %d: %d %s", seq, code, text)
	}
	return *ack.Offset
}

// refusedAs sends one message of the session at seq and checks that the
// node refuses it with code.
func (d *devProcess) refusedAs(t *testing.T, s session, seq uint64, body, code string) {
	t.Helper()
	status, text := d.postWith(t, "/v1/messages", body, s.headers(seq))
	if status/100 == 2 || !strings.Contains(string(text), `"code":"`+code+`"`) {
		t.Fatalf("produce seq %d: %d %s, want refused with %s", seq, status, text, code)
	}
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
	code, text := d.postWith(t, path, body, nil)
	if code/100 != 2 {
		t.Fatalf("POST %s %s: %d %s", path, body, code, text)
	}
	if into != nil {
		if err := json.Unmarshal(text, into); err != nil {
			t.Fatalf("POST %s: %v in %s", path, err, text)
		}
	}
}

// postWith posts body with header and returns the answer's status and body.
func (d *devProcess) postWith(t *testing.T, path, body string, header map[string]string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, d.url(path), strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	text, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, text
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
