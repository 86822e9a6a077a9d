package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"orderlog/ingest"
	"orderlog/ingest/wal"
	"orderlog/internal/node"
)

// runDev starts every orderlog role in one process: embedded etcd, a WAL
// store, the sequencer, an ingest node, the reader, gRPC and HTTP.
func runDev(args []string) error {
	fs := newFlagSet("dev", "dev [flags]\n\nRuns everything in one process: an embedded etcd server, a WAL store, the\nsequencer, an ingest node, the reader, and the gRPC and HTTP APIs. All state\nlives under --data; stop with Ctrl-C and start again to continue where it was.")
	dataDir := fs.String("data", "./data", "directory for all state (etcd/, wal/)")
	grpcAddr := fs.String("grpc-addr", "127.0.0.1:7070", "gRPC API address (producers, readers, and internal services)")
	httpAddr := fs.String("http-addr", "127.0.0.1:7080", "HTTP/JSON API address (also /metrics, /healthz and /readyz)")
	etcdAddr := fs.String("etcd-addr", "127.0.0.1:2379", "client address of the embedded etcd server")
	fsync := fs.String("fsync", wal.DefaultPolicy, `WAL fsync policy: "always,delay=<duration>" (fsync before every ack; waits that long after each fsync so more messages share the next), "always" (the same without the wait) or "interval=<duration>" (weaker)`)
	ackMode := fs.String("ack-mode", "quorum", `when producers are acknowledged: "quorum" (durable on the ack quorum) or "leader"`)
	maxMessage := fs.Int("max-message-bytes", 1<<20, "largest message value accepted")
	pprof := fs.Bool("pprof", false, "serve Go runtime profiles under /debug/pprof/ on the HTTP address")
	slowSync := fs.Duration("slow-fsync", wal.DefaultSlowSync, "log each WAL fdatasync that takes at least this long")
	var lf logFlags
	lf.register(fs)
	var tf timeoutFlags
	tf.register(fs, node.Roles{})
	var disk wal.DiskLimits
	registerDiskFlag(fs, &disk)
	var keep retentionFlags
	keep.register(fs)
	var archive archiveFlags
	archive.register(fs, true)
	if err := fs.Parse(args); err != nil {
		return err
	}
	archive.devDefault(*dataDir)
	logger, err := lf.logger(os.Stderr)
	if err != nil {
		return err
	}
	cfg := node.Config{
		DataDir: *dataDir, GRPCAddr: *grpcAddr, HTTPAddr: *httpAddr, EtcdAddr: *etcdAddr, FsyncPolicy: *fsync,
		Ingest: ingest.Config{AckMode: ingest.AckMode(*ackMode), MaxMessageBytes: *maxMessage}, Pprof: *pprof,
		Logger: logger, SlowSync: *slowSync, Disk: disk,
	}
	cfg.HTTPLimits.MaxMessageBytes = *maxMessage
	keep.apply(&cfg)
	if err := archive.apply(&cfg); err != nil {
		return err
	}
	if err := tf.apply(&cfg); err != nil {
		return err
	}
	signals, stopped := stopSignals()
	defer stopped()
	server, err := node.Start(cfg)
	if err != nil {
		return err
	}
	defer server.Close()
	ctx, cancel := context.WithTimeout(signals, 30*time.Second)
	err = server.WaitReady(ctx)
	cancel()
	if signals.Err() != nil { // stopped while starting: close cleanly all the same
		stopped()
		fmt.Println("orderlog dev: stopping")
		return nil
	}
	if err != nil {
		return err
	}
	fmt.Printf("orderlog dev is up (data in %s)\n", *dataDir)
	fmt.Printf("  gRPC  %s\n  HTTP  http://%s\n  etcd  %s\n\n", server.GRPCAddr(), server.HTTPAddr(), server.EtcdEndpoint())
	fmt.Println("Try, in another terminal:")
	fmt.Println("  seq 1 5 | ./bin/orderlog produce --topic demo")
	fmt.Println("  ./bin/orderlog read --offset 0")
	fmt.Printf("  curl -s http://%s/v1/status\n", server.HTTPAddr())
	fmt.Println("Stop with Ctrl-C.")

	<-signals.Done()
	stopped()
	fmt.Println("orderlog dev: stopping")
	return nil
}
