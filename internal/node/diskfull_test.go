package node

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"orderlog/client"
	"orderlog/ingest/wal"
	"orderlog/internal/apierr"
	"orderlog/internal/fileutil"
	"orderlog/proto/orderlogpb"
)

// A node whose WAL disk reaches the high-water mark refuses new messages
// with DISK_FULL over gRPC and HTTP, before it accepts them; everything
// acknowledged before stays readable, the node stays ready, and once
// space is freed below the low-water mark produce works again. Here the
// file system's usage is injected (the node, store and files are real);
// TestDiskFullOnASmallTmpfs fills a real one.
func TestDiskFullRefusesProduceAndResumes(t *testing.T) {
	disk := &settableDisk{fraction: 0.40}
	s := startServerWith(t, Config{DataDir: t.TempDir(), Disk: wal.DiskLimits{Stat: disk.stat}})
	defer s.Close()
	// Sampling at once stands for the watch's next sample (every 250 ms).
	exerciseDiskFull(t, s,
		func() { disk.set(0.93); s.store.SampleDisk() },
		func() { disk.set(0.80); s.store.SampleDisk() })
}

// The same on a 256 MiB tmpfs mounted under the WAL directory (root
// only): a filler file takes the disk above 90 %, removing it frees the
// space, and the watch's own statfs samples see both.
func TestDiskFullOnASmallTmpfs(t *testing.T) {
	if testing.Short() {
		t.Skip("mounts a tmpfs")
	}
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root; TestDiskFullRefusesProduceAndResumes covers the same with an injected statfs")
	}
	dir := t.TempDir()
	walDir := filepath.Join(dir, "wal")
	if err := os.MkdirAll(walDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=256m", "tmpfs", walDir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs here (%v: %s); TestDiskFullRefusesProduceAndResumes covers the same with an injected statfs", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", walDir).Run() })
	s := startServerWith(t, Config{DataDir: dir})
	defer s.Close()
	filler := filepath.Join(walDir, "filler")
	exerciseDiskFull(t, s,
		func() { fillTo(t, walDir, filler, 0.93) },
		func() {
			if err := os.Remove(filler); err != nil {
				t.Fatal(err)
			}
		})
}

// exerciseDiskFull produces, fills the disk, checks the refusals, frees
// it and produces again.
func exerciseDiskFull(t *testing.T, s *Server, fill, free func()) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := dial(t, s)
	acked := map[uint64]string{}
	for i := range 5 {
		value := fmt.Sprintf("before-%d", i)
		acked[produceRaw(ctx, t, s, value).Acks[0].Offset] = value
	}
	acked[produceHTTP(t, s, "before-http", http.StatusOK).offset] = "before-http"

	fill()
	waitDiskFull(t, s, true)
	if resp := produceRaw(ctx, t, s, "refused"); resp.ErrorCode != string(apierr.DiskFull) || len(resp.Acks) != 0 {
		t.Fatalf("gRPC produce on a full disk: %+v, want DISK_FULL", resp)
	}
	refused := produceHTTP(t, s, "refused-http", http.StatusServiceUnavailable)
	if refused.code != apierr.DiskFull || !refused.retryable || refused.retryAfter != "1" {
		t.Fatalf("HTTP produce on a full disk: %+v, want a retryable DISK_FULL with Retry-After", refused)
	}
	if code, body := httpGet(t, s, "/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz on a full disk: %d %s; the node still serves reads", code, body)
	}
	if got := metricValue(t, s, `orderlog_wal_disk_full`); got != 1 {
		t.Fatalf("orderlog_wal_disk_full %v", got)
	}
	if got := metricValue(t, s, `orderlog_ingest_refused_messages_total{reason="disk_full"}`); got != 2 {
		t.Fatalf("refused messages %v, want 2", got)
	}
	expectAcked(t, c, acked)

	free()
	waitDiskFull(t, s, false)
	acked[produceRaw(ctx, t, s, "after").Acks[0].Offset] = "after"
	acked[produceHTTP(t, s, "after-http", http.StatusOK).offset] = "after-http"
	expectAcked(t, c, acked)
	if got := metricValue(t, s, `orderlog_wal_disk_full`); got != 0 {
		t.Fatalf("orderlog_wal_disk_full %v after space was freed", got)
	}
	if got := metricValue(t, s, `orderlog_wal_journal_bytes`); got <= 0 {
		t.Fatalf("orderlog_wal_journal_bytes %v", got)
	}
}

// settableDisk is an injected statfs whose used fraction the test sets.
type settableDisk struct {
	mu       sync.Mutex
	fraction float64
}

func (d *settableDisk) set(f float64) { d.mu.Lock(); d.fraction = f; d.mu.Unlock() }

func (d *settableDisk) stat(string) (fileutil.DiskUsage, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	const total = 100 << 30
	used := uint64(d.fraction * total)
	return fileutil.DiskUsage{Total: total, Used: used, Avail: total - used}, nil
}

// fillTo writes name until the file system holding dir is fraction used.
func fillTo(t *testing.T, dir, name string, fraction float64) {
	t.Helper()
	u, err := fileutil.StatDisk(dir)
	if err != nil {
		t.Fatal(err)
	}
	need := int64(fraction*float64(u.Used+u.Avail)) - int64(u.Used)
	if need <= 0 {
		t.Fatalf("the disk is already %.1f%% used", 100*u.UsedFraction())
	}
	if err := os.WriteFile(name, make([]byte, need), 0o644); err != nil {
		t.Fatal(err)
	}
}

// waitDiskFull waits until GET /v1/status says the disk is (or is not)
// full, as the watch's next sample finds it.
func waitDiskFull(t *testing.T, s *Server, full bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, raw := httpGet(t, s, "/v1/status")
		var st orderlogpb.StatusResponse
		if err := json.Unmarshal([]byte(raw), &st); err != nil {
			t.Fatalf("status %s: %v", raw, err)
		}
		if st.DiskFull == full {
			if st.DiskTotalBytes == 0 || st.JournalBytes == 0 {
				t.Fatalf("status without the disk or journal: %s", raw)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("disk full never became %v: %s", full, raw)
		}
		time.Sleep(20 * time.Millisecond) // the watch samples every 250 ms
	}
}

// produceRaw sends one anonymous message on a raw Produce stream and
// returns the answer: refusals come back as they are, not retried.
func produceRaw(ctx context.Context, t *testing.T, s *Server, value string) *orderlogpb.ProduceResponse {
	t.Helper()
	stream, err := orderlogpb.NewProducerClient(grpcConn(t, s)).Produce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer stream.CloseSend()
	if err := stream.Send(&orderlogpb.ProduceRequest{Messages: []*orderlogpb.Message{msg("disk", "", value)}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatalf("produce %q: %v", value, err)
	}
	if resp.ErrorCode == "" && len(resp.Acks) != 1 {
		t.Fatalf("produce %q: %+v", value, resp)
	}
	return resp
}

type httpProduced struct {
	offset     uint64
	code       apierr.Code
	retryable  bool
	retryAfter string
}

// produceHTTP posts one message and checks the HTTP status.
func produceHTTP(t *testing.T, s *Server, value string, wantStatus int) httpProduced {
	t.Helper()
	resp, err := http.Post("http://"+s.HTTPAddr()+"/v1/messages", "application/json",
		strings.NewReader(`{"topic":"disk","payload":"`+value+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != wantStatus {
		t.Fatalf("POST %q: %d %s, want %d", value, resp.StatusCode, raw, wantStatus)
	}
	var body struct {
		Offset *uint64 `json:"offset"`
		Error  struct {
			Code      apierr.Code `json:"code"`
			Retryable bool        `json:"retryable"`
		} `json:"error"`
	}
	if err := json.Unmarshal(raw, &body); err != nil {
		t.Fatalf("POST %q: %s: %v", value, raw, err)
	}
	out := httpProduced{code: body.Error.Code, retryable: body.Error.Retryable, retryAfter: resp.Header.Get("Retry-After")}
	if body.Offset != nil {
		out.offset = *body.Offset
	}
	return out
}

// expectAcked reads the log and finds every acknowledged message at its
// offset.
func expectAcked(t *testing.T, c *client.Client, acked map[uint64]string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		msgs, _ := readAll(t, c)
		found := 0
		for _, m := range msgs {
			if want, ok := acked[m.Offset]; ok {
				if got := string(m.Message.GetValue()); got != want && got != strconv.Quote(want) {
					t.Fatalf("offset %d holds %q, want %q", m.Offset, got, want)
				}
				found++
			}
		}
		if found == len(acked) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d acknowledged messages readable", found, len(acked))
		}
		time.Sleep(20 * time.Millisecond) // C follows the acks within milliseconds
	}
}

// metricValue reads one sample, labels included in name, from /metrics.
func metricValue(t *testing.T, s *Server, name string) float64 {
	t.Helper()
	_, raw := httpGet(t, s, "/metrics")
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\S+)$`).FindStringSubmatch(raw)
	if m == nil {
		t.Fatalf("no %s in /metrics", name)
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}
