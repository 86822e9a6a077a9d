package node

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"orderlog/ingest"
	"orderlog/internal/etcdserver"
	"orderlog/internal/keys"
	"orderlog/proto/orderlogpb"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestSecondProcessOnADataDirIsRefused: a second node on a data directory in
// use fails at once with a clear error (it blocked for good inside the
// embedded etcd), and the directory serves again once the first is closed.
func TestSecondProcessOnADataDirIsRefused(t *testing.T) {
	dir := t.TempDir()
	first := startServer(t, dir)
	started := time.Now()
	second, err := Start(Config{DataDir: dir, GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", Logger: testLogger(t)})
	if err == nil {
		second.Close()
		t.Fatal("a second node started on a data directory in use")
	}
	if !strings.Contains(err.Error(), "in use") || time.Since(started) > 5*time.Second {
		t.Fatalf("second node: %v after %s, want an in-use error at once", err, time.Since(started))
	}
	first.Close()
	startServer(t, dir).Close()
}

// TestBadSettingsTouchNothing: settings that cannot work are refused before
// the data directory or etcd is touched.
func TestBadSettingsTouchNothing(t *testing.T) {
	for name, cfg := range map[string]Config{
		"fsync policy":       {FsyncPolicy: "bogus"},
		"ack mode":           {Ingest: ingest.Config{AckMode: "bogus"}},
		"ledger replication": {Ingest: ingest.Config{W: 1, A: 3, Tolerate: 5}},
		"commit replication": {Commit: Replication{W: 3, A: 1, Tolerate: 1}},
		"key file":           {EncryptionKeyFile: "/nonexistent/orderlog-keys"},
	} {
		dir := t.TempDir()
		cfg.DataDir, cfg.GRPCAddr, cfg.HTTPAddr, cfg.Logger = dir, "127.0.0.1:0", "127.0.0.1:0", testLogger(t)
		if s, err := Start(cfg); err == nil {
			s.Close()
			t.Errorf("%s: a node started", name)
			continue
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			t.Errorf("%s: refused, but left %d entries in the data directory", name, len(entries))
		}
	}
}

// TestCloseUnregistersTheStore: a node that stops cleanly takes its store's
// registration with it at once, so no new ensemble chooses a store that is
// gone (it stayed until its lease ran out).
func TestCloseUnregistersTheStore(t *testing.T) {
	etcd, err := etcdserver.Start(etcdserver.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer etcd.Close()
	cli, err := etcd.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stores := func() int64 {
		resp, err := cli.Get(ctx, keys.StoresPrefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		return resp.Count
	}
	s := startNodeOn(t, etcd, Roles{Ingest: true}, ingest.Config{}, Replication{})
	if n := stores(); n != 1 {
		t.Fatalf("%d stores registered, want 1", n)
	}
	s.Close()
	if n := stores(); n != 0 {
		t.Fatalf("%d stores registered right after a clean stop, want 0", n)
	}
}

// TestLedgerOpenFailuresAreLogged: ledgers that cannot be created (W = 3
// with one store) are reported in the log, not only counted in a metric,
// so a setting that cannot work does not pass for a slow system.
func TestLedgerOpenFailuresAreLogged(t *testing.T) {
	logged := make(chan string, 100)
	logger := slog.New(slog.NewTextHandler(lineWriter(func(line string) {
		select {
		case logged <- line:
		default:
		}
	}), nil))
	s, err := Start(Config{DataDir: t.TempDir(), GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", Logger: logger,
		Ingest: ingest.Config{W: 3, A: 2, Tolerate: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	raw, err := dial(t, s).RawProducer().Produce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := raw.Send(&orderlogpb.ProduceRequest{RequestId: 1, Messages: []*orderlogpb.Message{msg("t", "", "x")}}); err != nil {
		t.Fatal(err)
	}
	for {
		select {
		case line := <-logged:
			if strings.Contains(line, "cannot open a ledger") {
				return
			}
		case <-ctx.Done():
			t.Fatal("no log line about the ledgers that cannot be created")
		}
	}
}
