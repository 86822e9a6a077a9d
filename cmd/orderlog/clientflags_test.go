package main

import (
	"context"
	"flag"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"orderlog/client"
)

// TestAddrFlagRefusesABadList: --addr is checked when it is parsed.
func TestAddrFlagRefusesABadList(t *testing.T) {
	for _, bad := range []string{"", "h1:7070,h2", ",,"} {
		var cf clientFlags
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		cf.register(fs)
		if err := fs.Parse([]string{"--addr", bad}); err == nil {
			t.Errorf("--addr %q accepted", bad)
		}
	}
}

// TestProduceWithAnAddrList: produce given a list whose first node refuses
// connections logs every line through the next.
func TestProduceWithAnAddrList(t *testing.T) {
	srv, c := startDev(t)
	defer srv.stop()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := lis.Addr().String()
	lis.Close()
	path := filepath.Join(t.TempDir(), "lines.txt")
	if err := os.WriteFile(path, []byte("one\ntwo\nthree\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := runProduce([]string{"--addr", dead + "," + srv.grpcAddr, "--timeout", "30s", path}); err != nil {
		t.Fatalf("produce: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.WaitCommitted(ctx, 3); err != nil {
		t.Fatal(err)
	}
	var got []string
	err = c.Read(ctx, 0, 0, func(p *client.Page) error {
		for _, m := range p.Messages {
			got = append(got, string(m.Message.Value))
		}
		return nil
	})
	if err != nil || len(got) != 3 || got[0] != "one" || got[2] != "three" {
		t.Fatalf("read back %q, %v", got, err)
	}
}
