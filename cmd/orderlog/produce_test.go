package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"orderlog/client"
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
