package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"orderlog/client"
	"orderlog/internal/apierr"
)

// TestProduceSplitsFramesByBytes: 72 lines of 950 KB (each under the 1 MiB
// message limit, 68 MB together, the last without a newline) go out in
// frames small enough for gRPC, not as one frame of 100 lines, and every
// line is logged once, in order.
func TestProduceSplitsFramesByBytes(t *testing.T) {
	srv, c := startDev(t)
	defer srv.stop()

	const lines, size = 72, 950_000
	var input bytes.Buffer
	for i := range lines {
		input.Write(bytes.Repeat([]byte{byte('a' + i%26)}, size))
		if i < lines-1 {
			input.WriteByte('\n')
		}
	}
	path := filepath.Join(t.TempDir(), "big.txt")
	if err := os.WriteFile(path, input.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := runProduce([]string{"--addr", srv.grpcAddr, "--topic", "big", "--timeout", "60s", path}); err != nil {
		t.Fatalf("produce: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// produce waits only a little for C; the read below stops at C.
	if err := c.WaitCommitted(ctx, lines); err != nil {
		t.Fatal(err)
	}
	var got [][]byte
	err := c.Read(ctx, 0, 0, func(p *client.Page) error {
		for _, m := range p.Messages {
			got = append(got, m.Message.Value)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != lines {
		t.Fatalf("%d messages logged, want %d", len(got), lines)
	}
	for i, v := range got {
		if len(v) != size || v[0] != byte('a'+i%26) {
			t.Fatalf("message %d: %d bytes of %q", i, len(v), v[:1])
		}
	}
}

// TestProduceReportsWhatAFailureLeftLogged: a produce that a refused line
// ends says which lines were acknowledged before it (it said only the
// error, though 200 lines were logged).
func TestProduceReportsWhatAFailureLeftLogged(t *testing.T) {
	srv, c := startDev(t)
	defer srv.stop()
	var input bytes.Buffer
	for i := range 250 {
		fmt.Fprintf(&input, "line %d\n", i+1)
	}
	input.Write(bytes.Repeat([]byte{'x'}, 2<<20)) // over the 1 MiB message limit
	path := filepath.Join(t.TempDir(), "input.txt")
	if err := os.WriteFile(path, input.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	stderr, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	was := os.Stderr
	os.Stderr = stderr
	err = runProduce([]string{"--addr", srv.grpcAddr, "--frame", "50", path})
	os.Stderr = was
	if apierr.As(err).Code != apierr.MessageTooLarge {
		t.Fatalf("produce: %v, want MESSAGE_TOO_LARGE", err)
	}
	// Which lines made it depends on how frames were cut (a frame also
	// ends 50 ms after its first line); the report must match the log.
	raw, _ := os.ReadFile(stderr.Name())
	m := regexp.MustCompile(`lines 1\.\.(\d+) acknowledged.*from (\d+) on are not confirmed`).FindStringSubmatch(string(raw))
	if m == nil {
		t.Fatalf("stderr does not say what was logged:\n%s", raw)
	}
	acked, _ := strconv.Atoi(m[1])
	if next, _ := strconv.Atoi(m[2]); acked < 1 || acked > 250 || next != acked+1 {
		t.Fatalf("report %q: want lines 1..N with N ≤ 250 acknowledged", m[0])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.WaitCommitted(ctx, uint64(acked)); err != nil {
		t.Fatal(err)
	}
	var logged []string
	if err := c.Read(ctx, 0, 0, func(p *client.Page) error {
		for _, msg := range p.Messages {
			logged = append(logged, string(msg.Message.Value))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(logged) != acked || logged[acked-1] != fmt.Sprintf("line %d", acked) {
		t.Fatalf("report says lines 1..%d; the log holds %d lines", acked, len(logged))
	}
}
