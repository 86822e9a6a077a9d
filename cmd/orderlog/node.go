package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"orderlog/ingest"
	"orderlog/ingest/wal"
	"orderlog/internal/etcdserver"
	"orderlog/internal/node"
)

// nodeFlags are the flags of `orderlog node`.
type nodeFlags struct {
	name, dataDir, grpcAddr, httpAddr string
	grpcAdvertise                     string
	// etcd lists an external cluster's client addresses; else the process
	// runs an embedded member of the cluster initialCluster lists.
	etcd, listenClient, listenPeer, initialCluster, clusterState string
	w, a, commitW, commitA                                       int
	fsync, ackMode                                               string
	maxMessage                                                   int
	slowSync                                                     time.Duration
	pprof                                                        bool
	log                                                          logFlags
	timeouts                                                     timeoutFlags
	disk                                                         wal.DiskLimits
	keep                                                         retentionFlags
	encryption                                                   encryptionFlags
	auth                                                         authFlags
	tls                                                          tlsFlags
	archive                                                      archiveFlags
}

const nodeUsage = `node --name NAME --data DIR [--etcd-initial-cluster n1=http://h1:2380,... | --etcd h1:2379,...] [flags]

Runs every role in one process — a WAL store, an ingest node with the gRPC and
HTTP APIs, a sequencer candidate and a reader: the unit an operator deploys
three of. Each node runs an embedded etcd member (etcd's raft is the
consensus; three nodes need nothing else), or connects to an external etcd
cluster with --etcd. A node restarted with its data directory rejoins.`

func (f *nodeFlags) register(fs *flag.FlagSet) {
	host, _ := os.Hostname()
	fs.StringVar(&f.name, "name", host, "node name: its etcd member name, and its name in incarnations and ledger metadata")
	fs.StringVar(&f.dataDir, "data", "./data", "directory for this node's state (etcd/, wal/)")
	fs.StringVar(&f.grpcAddr, "grpc-addr", "127.0.0.1:7070", "gRPC API address (producers, readers, and internal services)")
	fs.StringVar(&f.grpcAdvertise, "grpc-advertise", "", "gRPC address other nodes and clients are given, when it is not --grpc-addr (NAT, a proxy); default: --grpc-addr")
	fs.StringVar(&f.httpAddr, "http-addr", "127.0.0.1:7080", "HTTP/JSON API address (also /metrics, /healthz and /readyz)")
	fs.StringVar(&f.etcd, "etcd", "", "comma-separated client addresses of an external etcd cluster (instead of an embedded member)")
	fs.StringVar(&f.listenClient, "etcd-listen-client", "127.0.0.1:2379", "embedded etcd member: client address")
	fs.StringVar(&f.listenPeer, "etcd-listen-peer", "", "embedded etcd member: peer address (default: this node's address in --etcd-initial-cluster, else 127.0.0.1:2380)")
	fs.StringVar(&f.initialCluster, "etcd-initial-cluster", "", "embedded etcd member: every founding member, name=http://host:peerport,... (https:// with --tls-cert; default: this node alone)")
	fs.StringVar(&f.clusterState, "etcd-cluster-state", etcdserver.StateNew, `embedded etcd member: "new" (a founder) or "existing" (joining a running cluster after etcdctl member add); ignored once the member has data`)
	fs.IntVar(&f.w, "w", 0, "stores per ledger (W); 0: 3 with three or more nodes (or an external etcd), else the node count")
	fs.IntVar(&f.a, "a", 0, "acks per entry (A); 0: a majority of W")
	fs.IntVar(&f.commitW, "commit-w", 0, "stores per commit ledger; 0: the same as --w")
	fs.IntVar(&f.commitA, "commit-a", 0, "acks per commit entry; 0: the same as --a")
	fs.StringVar(&f.fsync, "fsync", wal.DefaultPolicy, `WAL fsync policy: "always,delay=<duration>", "always" or "interval=<duration>" (weaker)`)
	fs.StringVar(&f.ackMode, "ack-mode", "quorum", `when producers are acknowledged unless a request asks: "replicated" (also "quorum": durable on the ack quorum) or "leader"`)
	fs.IntVar(&f.maxMessage, "max-message-bytes", 1<<20, "largest message value accepted")
	fs.DurationVar(&f.slowSync, "slow-fsync", wal.DefaultSlowSync, "log each WAL fdatasync that takes at least this long")
	fs.BoolVar(&f.pprof, "pprof", false, "serve Go runtime profiles under /debug/pprof/ on the HTTP address")
	f.log.register(fs)
	f.timeouts.register(fs, node.Roles{})
	registerDiskFlag(fs, &f.disk)
	f.keep.register(fs)
	f.encryption.register(fs)
	f.auth.register(fs)
	f.tls.register(fs)
	f.archive.register(fs, false)
}

// config maps the flags onto a node configuration (node.Config.Validate
// fills the replication defaults and refuses W > nodes).
func (f *nodeFlags) config() (node.Config, error) {
	if f.name == "" {
		return node.Config{}, errors.New("--name is required")
	}
	logger, err := f.log.logger(os.Stderr)
	if err != nil {
		return node.Config{}, err
	}
	cfg := node.Config{NodeName: f.name, DataDir: f.dataDir, GRPCAddr: f.grpcAddr, AdvertiseGRPC: f.grpcAdvertise, HTTPAddr: f.httpAddr,
		FsyncPolicy: f.fsync, SlowSync: f.slowSync, Pprof: f.pprof, Logger: logger, Disk: f.disk,
		Ingest: ingest.Config{AckMode: ingest.AckMode(f.ackMode), MaxMessageBytes: f.maxMessage}}
	cfg.HTTPLimits.MaxMessageBytes = f.maxMessage
	f.keep.apply(&cfg)
	f.encryption.apply(&cfg)
	if err := f.auth.apply(&cfg); err != nil {
		return node.Config{}, err
	}
	if err := f.tls.apply(&cfg); err != nil {
		return node.Config{}, err
	}
	if err := f.archive.apply(&cfg); err != nil {
		return node.Config{}, err
	}
	if f.etcd != "" {
		if f.initialCluster != "" {
			return node.Config{}, errors.New("--etcd (an external cluster) and --etcd-initial-cluster (an embedded member) are exclusive")
		}
		cfg.EtcdEndpoints = strings.Split(f.etcd, ",")
	} else {
		cfg.EtcdAddr = f.listenClient
		cfg.Member = node.EtcdMember{InitialCluster: f.initialCluster, PeerAddr: f.listenPeer, ClusterState: f.clusterState}
		if cfg.Member.InitialCluster == "" {
			peer := f.listenPeer
			if peer == "" {
				peer = "127.0.0.1:2380"
			}
			cfg.Member.InitialCluster = f.name + "=" + scheme(cfg) + "://" + peer
		}
	}
	cfg.Ingest.W, cfg.Ingest.A, cfg.Ingest.Tolerate, err = replicationFlags(f.w, f.a, cfg.Nodes())
	if err != nil {
		return node.Config{}, err
	}
	if f.commitW != 0 || f.commitA != 0 {
		w, a := orDefault(f.commitW, cfg.Ingest.W), orDefault(f.commitA, cfg.Ingest.A)
		cfg.Commit.W, cfg.Commit.A, cfg.Commit.Tolerate, err = replicationFlags(w, a, cfg.Nodes())
		if err != nil {
			return node.Config{}, err
		}
	}
	return cfg, f.timeouts.apply(&cfg)
}

// replicationFlags resolves --w and --a: W defaults from the node count
// (node.DefaultReplication; unknown with an external etcd: 3), A to a
// majority of W, and the failures tolerated follow (A ≥ f+1, W ≥ 2f+1).
func replicationFlags(w, a, nodes int) (int, int, int, error) {
	if w < 0 || a < 0 {
		return 0, 0, 0, fmt.Errorf("--w %d --a %d: want positive numbers", w, a)
	}
	if nodes == 0 {
		nodes = 3
	}
	if w == 0 {
		w = node.DefaultReplication(nodes).W
	}
	if a == 0 {
		a = w/2 + 1
	}
	if a > w {
		return 0, 0, 0, fmt.Errorf("--a %d is more than --w %d", a, w)
	}
	return w, a, min(a-1, (w-1)/2), nil
}

func orDefault(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

func runNode(args []string) error {
	fs := newFlagSet("node", nodeUsage)
	var f nodeFlags
	f.register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := f.config()
	if err != nil {
		return err
	}
	signals, stopped := stopSignals()
	defer stopped()
	if cfg.Member.InitialCluster != "" && cfg.Nodes() > 1 {
		fmt.Printf("orderlog node %s: starting etcd member (cluster %s); waiting for a quorum of members\n", f.name, cfg.Member.InitialCluster)
	}
	server, err := startNode(signals, cfg)
	if err != nil || server == nil {
		return err
	}
	defer server.Close()
	pidFile := filepath.Join(f.dataDir, "pid")
	if err := os.WriteFile(pidFile, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		return err
	}
	defer os.Remove(pidFile)
	fmt.Printf("orderlog node %s serving (pid %d, data in %s)\n", f.name, os.Getpid(), f.dataDir)
	fmt.Printf("  gRPC  %s\n  HTTP  %s://%s\n", server.GRPCAddr(), scheme(cfg), server.HTTPAddr())
	reloadOnSIGHUP(signals, server, cfg)
	if cfg.EtcdEndpoints == nil {
		fmt.Printf("  etcd  %s\n", server.EtcdEndpoint())
	}
	fmt.Printf("  replication W=%d A=%d (commit ledger W=%d A=%d)\n", cfg.Ingest.W, cfg.Ingest.A, commitW(cfg), commitA(cfg))
	go reportReady(signals, server, f.name)
	<-signals.Done()
	stopped()
	fmt.Printf("orderlog node %s: stopping\n", f.name)
	return nil
}

func commitW(cfg node.Config) int { return orDefault(cfg.Commit.W, cfg.Ingest.W) }
func commitA(cfg node.Config) int { return orDefault(cfg.Commit.A, cfg.Ingest.A) }

// startNode starts the node; a stop signal while etcd waits for its quorum
// ends the wait (nil server, nil error).
func startNode(signals context.Context, cfg node.Config) (*node.Server, error) {
	type started struct {
		server *node.Server
		err    error
	}
	result := make(chan started, 1)
	go func() {
		s, err := node.Start(cfg)
		result <- started{s, err}
	}()
	select {
	case r := <-result:
		return r.server, r.err
	case <-signals.Done():
		fmt.Println("orderlog node: stopping while starting")
		go func() { // close it if it still starts; the process exits anyway
			if r := <-result; r.server != nil {
				r.server.Close()
			}
		}()
		return nil, nil
	}
}

// reportReady prints when the node first serves its roles, and why not yet
// every few seconds until then.
func reportReady(ctx context.Context, server *node.Server, name string) {
	for {
		wait, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := server.WaitReady(wait)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			fmt.Printf("orderlog node %s is ready\n", name)
			return
		}
		fmt.Printf("orderlog node %s: not ready yet: %v\n", name, server.Ready())
	}
}
