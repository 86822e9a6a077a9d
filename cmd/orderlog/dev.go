package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"orderlog/ingest"
	"orderlog/ingest/wal"
	"orderlog/internal/node"
	"orderlog/internal/tlsconfig"
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
	ackMode := fs.String("ack-mode", "quorum", `when producers are acknowledged unless a request asks: "replicated" (also "quorum": durable on the ack quorum) or "leader"`)
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
	var encryption encryptionFlags
	encryption.register(fs)
	var af authFlags
	af.register(fs)
	var tlsf tlsFlags
	tlsf.register(fs)
	devTLSOn := fs.Bool("tls", false, "serve every port over TLS with a local CA and certificates made in --data/tls (kept across restarts); prints how clients connect")
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
	encryption.apply(&cfg)
	if err := af.apply(&cfg); err != nil {
		return err
	}
	if *devTLSOn && tlsf.files.Enabled() {
		return errors.New("--tls makes its own certificates: give it, or --tls-cert, --tls-key and --tls-ca, not both")
	}
	var dev tlsconfig.Dev
	if *devTLSOn {
		if dev, err = devTLS(filepath.Join(*dataDir, "tls"), *grpcAddr, *httpAddr, *etcdAddr); err != nil {
			return err
		}
		tlsf.files = dev.Node()
	}
	if err := tlsf.apply(&cfg); err != nil {
		return err
	}
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
	fmt.Printf("  gRPC  %s\n  HTTP  %s://%s\n  etcd  %s\n\n", server.GRPCAddr(), scheme(cfg), server.HTTPAddr(), server.EtcdEndpoint())
	reloadOnSIGHUP(signals, server, cfg)
	printDevTry(server, cfg, dev)
	fmt.Println("Stop with Ctrl-C.")

	<-signals.Done()
	stopped()
	fmt.Println("orderlog dev: stopping")
	return nil
}

// printDevTry prints commands to try against the dev server: with
// --tls, with the flags that trust its CA (and present the client
// certificate).
func printDevTry(server *node.Server, cfg node.Config, dev tlsconfig.Dev) {
	clientTLS, curlTLS := "", ""
	switch {
	case dev.Dir != "":
		clientTLS = fmt.Sprintf(" --tls-ca %s --tls-cert %s --tls-key %s", dev.CA, dev.ClientCert, dev.ClientKey)
		curlTLS = fmt.Sprintf(" --cacert %s --cert %s --key %s", dev.CA, dev.ClientCert, dev.ClientKey)
	case cfg.TLS.Enabled():
		clientTLS, curlTLS = " --tls-ca "+cfg.TLS.CAFile, " --cacert "+cfg.TLS.CAFile
	}
	fmt.Println("Try, in another terminal:")
	fmt.Printf("  seq 1 5 | ./bin/orderlog produce --topic demo%s\n", clientTLS)
	fmt.Printf("  ./bin/orderlog read --offset 0%s\n", clientTLS)
	fmt.Printf("  curl -s%s %s://%s/v1/status\n", curlTLS, scheme(cfg), server.HTTPAddr())
}
