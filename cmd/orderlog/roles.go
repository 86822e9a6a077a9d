package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"orderlog/ingest"
	"orderlog/ingest/wal"
	"orderlog/internal/node"
)

// roleFlags are the flags every role command takes.
type roleFlags struct {
	etcd          string
	grpcAddr      string
	grpcAdvertise string
	httpAddr      string
	name          string
	log           logFlags
	timeouts      timeoutFlags
	tls           tlsFlags
	auth          authFlags
}

func (r *roleFlags) register(fs *flag.FlagSet, roles node.Roles, defaultGRPC, defaultHTTP, httpUse string) {
	r.timeouts.register(fs, roles)
	fs.StringVar(&r.etcd, "etcd", "", "comma-separated client URLs of the etcd cluster (required)")
	fs.StringVar(&r.grpcAddr, "grpc-addr", defaultGRPC, "gRPC address this role serves on (with the grpc.health.v1 health service and server reflection)")
	fs.StringVar(&r.grpcAdvertise, "grpc-advertise", "", "gRPC address other processes and clients are given, when it is not --grpc-addr (NAT, a proxy); default: --grpc-addr")
	fs.StringVar(&r.httpAddr, "http-addr", defaultHTTP, "HTTP address: "+httpUse)
	host, _ := os.Hostname()
	fs.StringVar(&r.name, "name", host, "node name (in incarnations and ledger metadata)")
	r.log.register(fs)
	r.tls.register(fs)
	r.auth.register(fs) // every role: a process serving any public service must honour --auth required
}

// observabilityUse says what every role's HTTP address serves.
const observabilityUse = "/metrics, /healthz (alive) and /readyz (ready to serve the role)"

func (r *roleFlags) config(roles node.Roles) (node.Config, error) {
	if r.etcd == "" {
		return node.Config{}, errors.New("--etcd is required (use `orderlog dev` for a single machine)")
	}
	logger, err := r.log.logger(os.Stderr)
	if err != nil {
		return node.Config{}, err
	}
	cfg := node.Config{Roles: roles, EtcdEndpoints: strings.Split(r.etcd, ","), GRPCAddr: r.grpcAddr, AdvertiseGRPC: r.grpcAdvertise, HTTPAddr: r.httpAddr,
		NodeName: r.name, Logger: logger}
	if err := r.auth.apply(&cfg); err != nil {
		return cfg, err
	}
	return cfg, r.tls.apply(&cfg)
}

func runSequencer(args []string) error {
	fs := newFlagSet("sequencer", "sequencer --etcd URLS [flags]\n\nCampaigns for sequencer leadership; the leader grants offsets, writes the\ncommit log and serves the commit map. Run two or three for failover.")
	var rf roleFlags
	rf.register(fs, node.Roles{Sequencer: true}, "127.0.0.1:7071", "127.0.0.1:7081", observabilityUse)
	var commit node.Replication
	fs.IntVar(&commit.W, "commit-w", 3, "stores per commit ledger (W)")
	fs.IntVar(&commit.A, "commit-a", 2, "acks per commit entry (A)")
	fs.IntVar(&commit.Tolerate, "tolerate", 1, "store failures to tolerate (A ≥ f+1, W ≥ 2f+1)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := rf.config(node.Roles{Sequencer: true})
	if err != nil {
		return err
	}
	cfg.Commit = commit
	if err := rf.timeouts.apply(&cfg); err != nil {
		return err
	}
	return serveRole("sequencer", cfg)
}

func runIngest(args []string) error {
	fs := newFlagSet("ingest", "ingest --etcd URLS --data DIR [flags]\n\nRuns a WAL store and an ingest node: producer sessions over gRPC, the HTTP\nAPI, and ledgers replicated on W registered stores.")
	var rf roleFlags
	rf.register(fs, node.Roles{Ingest: true}, "127.0.0.1:7070", "127.0.0.1:7080", "the HTTP/JSON API, "+observabilityUse)
	dataDir := fs.String("data", "./data", "directory of this node's WAL store")
	slowSync := fs.Duration("slow-fsync", wal.DefaultSlowSync, "log each WAL fdatasync that takes at least this long")
	var in ingest.Config
	fs.IntVar(&in.W, "w", 3, "stores per ledger (W)")
	fs.IntVar(&in.A, "a", 2, "acks per entry (A)")
	fs.IntVar(&in.Tolerate, "tolerate", 1, "store failures to tolerate (A ≥ f+1, W ≥ 2f+1)")
	ackMode := fs.String("ack-mode", "quorum", `"replicated" (also "quorum") or "leader"; a request may ask for either`)
	fsync := fs.String("fsync", wal.DefaultPolicy, `WAL fsync policy: "always,delay=<duration>", "always" or "interval=<duration>" (weaker)`)
	fs.IntVar(&in.MaxMessageBytes, "max-message-bytes", 1<<20, "largest message value accepted")
	var disk wal.DiskLimits
	registerDiskFlag(fs, &disk)
	var keep retentionFlags
	keep.register(fs)
	var encryption encryptionFlags
	encryption.register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := rf.config(node.Roles{Ingest: true})
	if err != nil {
		return err
	}
	in.AckMode = ingest.AckMode(*ackMode)
	cfg.Ingest, cfg.DataDir, cfg.FsyncPolicy, cfg.SlowSync, cfg.Disk = in, *dataDir, *fsync, *slowSync, disk
	cfg.HTTPLimits.MaxMessageBytes = in.MaxMessageBytes
	keep.apply(&cfg)
	encryption.apply(&cfg)
	if err := rf.timeouts.apply(&cfg); err != nil {
		return err
	}
	return serveRole("ingest", cfg)
}

func runReader(args []string) error {
	fs := newFlagSet("reader", "reader --etcd URLS [flags]\n\nFollows the sequencer's commit map and serves Read, Tail and Query over gRPC.")
	var rf roleFlags
	rf.register(fs, node.Roles{Reader: true}, "127.0.0.1:7072", "127.0.0.1:7082", observabilityUse)
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := rf.config(node.Roles{Reader: true})
	if err != nil {
		return err
	}
	return serveRole("reader", cfg)
}

// serveRole starts a role process and serves until SIGINT or SIGTERM.
func serveRole(role string, cfg node.Config) error {
	signals, stopped := stopSignals()
	defer stopped()
	server, err := node.Start(cfg)
	if err != nil {
		return err
	}
	defer server.Close()
	fmt.Printf("orderlog %s serving gRPC on %s, HTTP on %s://%s\n", role, server.GRPCAddr(), scheme(cfg), server.HTTPAddr())
	reloadOnSIGHUP(signals, server, cfg)
	<-signals.Done()
	stopped()
	fmt.Printf("orderlog %s: stopping\n", role)
	return nil
}

// stopSignals is a context that ends at the first SIGINT or SIGTERM, caught
// from before the node starts. Once stopped is called a second signal kills
// the process, should the clean stop hang.
func stopSignals() (signals context.Context, stopped func()) {
	return signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
}
