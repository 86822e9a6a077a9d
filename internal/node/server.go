// Package node assembles one orderlog process: the roles it runs and how
// they are wired. `orderlog dev` runs every role in one process through it:
// an embedded etcd server, a WAL store, a sequencer node, an ingest node, a
// reader, and the gRPC and HTTP front ends — the same code paths a cluster
// uses, with the store's own node as the only ensemble member (W = A = 1).
package node

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"orderlog/consumer"
	"orderlog/ingest"
	"orderlog/ingest/httpapi"
	"orderlog/ingest/ledger"
	"orderlog/ingest/retention"
	"orderlog/ingest/wal"
	"orderlog/internal/auth"
	"orderlog/internal/etcdserver"
	"orderlog/internal/event"
	"orderlog/internal/grpcopt"
	"orderlog/internal/tlsconfig"
	"orderlog/proto/orderlogpb"
	"orderlog/proto/walpb"
	"orderlog/reader"
	"orderlog/schema"
	"orderlog/sequencer"
	"orderlog/tiering"
)

// Roles says which roles a process runs. The zero value runs them all,
// as `orderlog dev` does.
type Roles struct {
	// Sequencer campaigns for sequencer leadership.
	Sequencer bool
	// Ingest runs a WAL store, an ingest node, the Producer gRPC service and
	// the HTTP API (whose reads use a reader in the same process).
	Ingest bool
	// Reader serves Read, Tail and Query from the commit map.
	Reader bool
}

func (r Roles) none() bool { return !r.Sequencer && !r.Ingest && !r.Reader }

// Config configures an orderlog process.
type Config struct {
	// Roles to run; zero: all of them.
	Roles Roles
	// EtcdEndpoints are the client URLs of an etcd cluster; empty: run an
	// embedded etcd server in DataDir/etcd (single machine only).
	EtcdEndpoints []string
	// DataDir holds etcd/ (when embedded) and wal/ (with the ingest role).
	DataDir string
	// GRPCAddr and HTTPAddr are where the APIs listen (port 0: any free port).
	GRPCAddr string
	HTTPAddr string
	// AdvertiseGRPC is the gRPC address other nodes and clients are given
	// (store registration, the sequencer's election value, Release, the
	// client endpoint list) when it is not the listen address (NAT, a
	// proxy in front of this one node). It must reach this node and no
	// other: stores are told apart by address. Empty: the listen address.
	AdvertiseGRPC string
	// EtcdAddr is the embedded etcd server's client address.
	EtcdAddr string
	// Member makes the embedded etcd server a member of a multi-member
	// cluster (`orderlog node`); zero: a single-member server.
	Member EtcdMember
	// NodeName names this node in incarnations and ledger metadata.
	NodeName string
	// FsyncPolicy is the WAL store's policy: "always,delay=<duration>"
	// (fewer, larger flushes; acks still wait for them; "" is
	// wal.DefaultPolicy), "always" (a flush as soon as the last one is done)
	// or "interval=<duration>" (weaker: acknowledged data can be lost).
	FsyncPolicy string
	// Ingest tunes the ingest node (limits, ack mode, batching) and the
	// replication of its ledgers (W, A, Tolerate; default W = A = 1).
	Ingest ingest.Config
	// Auth says when the public services need credentials (auth.go).
	Auth AuthConfig
	// HTTPTimeouts bound slow and idle HTTP clients (0: the defaults).
	HTTPTimeouts HTTPTimeouts
	// Limits bound the streams, connections and producer sessions one
	// principal or address holds (limits.go; 0: the defaults).
	Limits Limits
	// Commit is the replication of the sequencer's commit ledger; its
	// ensemble is chosen from the registered stores. Default W = A = 1.
	Commit Replication
	// HTTPLimits bounds HTTP requests.
	HTTPLimits httpapi.Limits
	// TLS secures every port of the process (tls.go); zero: plaintext.
	TLS TLSConfig
	// Pprof serves Go's runtime profiles under /debug/pprof/ on the HTTP
	// address (off by default: profiles reveal internals).
	Pprof bool
	// Logger logs every role's events and the failures they retry by
	// themselves; nil discards. The role commands log to stderr.
	Logger *slog.Logger
	// Events is told of what happens in every role, besides the log
	// (event.Logging); tests wait on it.
	Events event.Listener
	// SlowSync is the WAL fdatasync duration logged as slow; default
	// wal.DefaultSlowSync, negative: never.
	SlowSync time.Duration
	// Sequencer tunes the sequencer role's election and grant timeouts.
	Sequencer SequencerTimeouts
	// StoreLeaseTTL is the TTL of the etcd lease the WAL store's
	// registration is bound to, in whole seconds; default Ingest.LeaseTTL.
	StoreLeaseTTL time.Duration
	// Disk sets the WAL disk's marks (zero: high-water 90 %, low-water
	// 85 %, hard 95 %): from the high-water mark the ingest node refuses
	// new messages with DISK_FULL (disk.go).
	Disk wal.DiskLimits
	// Retention is how much of the log is kept (retention.go).
	Retention RetentionConfig
	// Archive is where the log is archived as Parquet (archive.go).
	Archive ArchiveConfig
	// Checkpoint configures the sequencer's commit-log checkpoints (its
	// Floor is the log start, set here).
	Checkpoint sequencer.CheckpointConfig
	// SegmentSize is the WAL journal's segment size (default 64 MiB): space
	// is freed a segment at a time, once no live ledger has records in it.
	SegmentSize int64
	// EncryptionKeyFile, if set, encrypts the WAL store's entry payloads
	// at rest under the keys in this file (wal.ParseKeys): a store that
	// holds records under keys the file lacks does not open. Empty: no
	// encryption.
	EncryptionKeyFile string
}

// Replication is W, A and the store failures tolerated.
type Replication = ledger.Replication

// Validate fills defaults and rejects nonsense.
func (c *Config) Validate() error {
	if c.Roles.none() {
		c.Roles = Roles{Sequencer: true, Ingest: true, Reader: true}
	}
	if c.DataDir == "" && (c.Roles.Ingest || len(c.EtcdEndpoints) == 0) {
		return errors.New("node: DataDir is required")
	}
	if c.GRPCAddr == "" {
		c.GRPCAddr = "127.0.0.1:7070"
	}
	if c.HTTPAddr == "" {
		c.HTTPAddr = "127.0.0.1:7080"
	}
	if c.EtcdAddr == "" {
		c.EtcdAddr = "127.0.0.1:0"
	}
	if c.NodeName == "" {
		c.NodeName = "dev"
	}
	c.Ingest.NodeName = c.NodeName
	if err := c.validateCluster(); err != nil {
		return err
	}
	if c.Commit.W == 0 {
		c.Commit = Replication{W: 1, A: 1}
	}
	// Everything is checked before anything touches the data directory
	// or etcd: a bad flag must leave nothing behind.
	if _, err := wal.ParsePolicy(c.FsyncPolicy); err != nil {
		return err
	}
	if c.EncryptionKeyFile != "" {
		if _, err := wal.LoadKeyFile(c.EncryptionKeyFile); err != nil {
			return err
		}
	}
	if c.Roles.Sequencer {
		if err := c.Commit.Validate(); err != nil {
			return fmt.Errorf("commit ledger replication: %w", err)
		}
	}
	if c.Roles.Ingest {
		if err := c.Disk.Validate(); err != nil {
			return err
		}
		if err := c.Ingest.Validate(); err != nil {
			return err
		}
		if err := (Replication{W: c.Ingest.W, A: c.Ingest.A, Tolerate: c.Ingest.Tolerate}).Validate(); err != nil {
			return fmt.Errorf("ledger replication: %w", err)
		}
	}
	if err := c.validateTLS(); err != nil {
		return err
	}
	if err := c.validateStoreLease(); err != nil {
		return err
	}
	if err := c.Limits.Validate(); err != nil {
		return err
	}
	return c.HTTPLimits.Validate()
}

// Server is a running orderlog process.
type Server struct {
	cfg Config
	// schemaChecker is the ingest role's schema validation (schemas_http.go).
	schemaChecker *schema.Checker
	// logger is cfg.Logger or a discarding one; events is the log's
	// listener teed with cfg.Events.
	logger       *slog.Logger
	events       event.Listener
	readiness    *readiness
	etcd         *etcdserver.Server
	cli          *clientv3.Client
	tls          *tlsconfig.Source // nil: plaintext (tls.go)
	store        *wal.Store
	disk         *diskAdmission
	storeService *wal.Service
	grpc         *grpc.Server
	grpcLis      net.Listener
	http         *http.Server
	httpLis      net.Listener
	grpcDialer   *ledger.GRPCDialer
	dialer       ledger.Dialer
	sequencer    *sequencer.Node
	// sequencerService serves s.sequencer; LocalGrants reaches it in process.
	sequencerService *sequencer.Service
	// sequencerWait is why the sequencer node does not campaign yet (no
	// ensemble for its commit ledger), nil once it does.
	sequencerWait atomic.Pointer[error]
	// quorum tells whether this node reaches the etcd quorum (quorum.go).
	quorum quorumWatch
	// peers tells an etcd election from a partition (peers.go).
	peers peerWatch
	// watches runs quorum and peers until the server's context ends.
	watches sync.WaitGroup
	// heard is what the ingest role heard from sequencer leaders, for
	// the sequencer standby (sequencer.LeaderHeard).
	heard  sequencer.LeaderHeard
	ingest *ingest.Node
	reader *reader.Reader
	// auth authenticates and authorizes the public services (auth.go).
	auth *authGuard
	// consumers serves consumer groups (with the reader).
	consumers *consumer.Service
	// retentionMetrics are the retention worker's (nil without one).
	retentionMetrics *retention.Metrics
	// archive serves reads below the log start, and tieringMetrics are
	// the tiering worker's (both nil without an archive; archive.go).
	archive        *tiering.ArchiveReader
	tieringMetrics *tiering.Metrics
	// logStart is the log start as last read from etcd (retention.go).
	logStart     atomic.Uint64
	oldest       oldestCache // status_bounded.go
	registration *storeRegistration
	dataLock     *os.File // flock on <data>/LOCK while the process runs
	cancel       context.CancelFunc
	done         chan struct{}
}

// Start starts every role and serves until Close.
func Start(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	logger := event.OrDiscard(cfg.Logger)
	s := &Server{cfg: cfg, logger: logger, events: event.Tee(event.Logging(logger), cfg.Events), done: make(chan struct{})}
	s.cfg.Ingest.Events = event.Tee(s.events, cfg.Ingest.Events)
	if s.cfg.Ingest.Logger == nil {
		s.cfg.Ingest.Logger = logger
	}
	if err := s.start(); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

func (s *Server) start() error {
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	if err := s.lockDataDir(); err != nil {
		return err
	}
	if err := s.loadTLS(); err != nil {
		return err
	}
	if err := s.connectEtcd(); err != nil {
		return err
	}
	var err error
	if s.grpcLis, err = net.Listen("tcp", s.cfg.GRPCAddr); err != nil {
		return fmt.Errorf("listen gRPC: %w", err)
	}
	if s.auth, err = newAuthGuard(ctx, s.cli, s.cfg.Auth, s.cfg.Limits, s.logger); err != nil { // auth.go
		return fmt.Errorf("load credentials: %w", err)
	}
	if s.auth.holdings.limits.ConnectionsPerAddress > 0 {
		s.auth.holdings.peers = followPeers(ctx, s.cli, &s.watches) // limits_peers.go: not counted by the listeners
	}
	s.grpcLis = s.auth.holdings.listener(s.grpcLis) // limits_listen.go
	s.cfg.Ingest.Authorize = s.auth
	s.grpc = grpc.NewServer(append(append(append(grpcopt.ServerOptions(), s.tlsServerOptions()...), grpcServerKeepalive()...), s.auth.serverOptions()...)...)
	s.registerObservability(s.grpc)
	if s.cfg.Roles.Ingest || s.cfg.Roles.Reader { // the roles with public APIs
		orderlogpb.RegisterAuthServer(s.grpc, &authService{store: auth.NewStore(s.cli), logger: s.logger})
	}
	s.registerSchemas(s.grpc) // schemas_grpc.go: the Schemas service, on every role
	if s.cfg.Roles.Ingest {
		if err := s.openStore(ctx); err != nil {
			return err
		}
	}
	s.grpcDialer = ledger.NewGRPCDialer(grpcopt.DialOptionsWith(s.peerCredentials())...)
	resolving, err := newResolvingDialer(ctx, s.cli, s.grpcDialer)
	if err != nil {
		return err
	}
	s.dialer = resolving
	if s.store != nil {
		s.dialer = localFirstDialer{storeID: s.store.StoreID(), local: wal.NewLocalClient(s.storeService), next: resolving}
	}
	if err := s.startRoles(ctx); err != nil {
		return err
	}
	s.watchTLS(ctx)
	s.quorum.lastOK.Store(time.Now().UnixNano())
	go s.readiness.run(ctx)
	s.watches.Go(func() { s.quorum.run(ctx, s.cli) })
	if s.ingest != nil {
		s.peers.self, s.peers.dial = s.AdvertisedGRPCAddr(), grpcopt.DialOptionsWith(s.peerCredentials())
		s.watches.Go(func() { s.peers.run(ctx, s.cli) })
	}
	go s.grpc.Serve(s.grpcLis)
	if err := s.startHTTP(); err != nil {
		return err
	}
	s.warnPlaintext() // tls.go
	return nil
}

// connectEtcd starts the embedded etcd server, or connects to a cluster.
func (s *Server) connectEtcd() error {
	var err error
	if len(s.cfg.EtcdEndpoints) > 0 {
		s.cli, err = clientv3.New(clientv3.Config{Endpoints: s.cfg.EtcdEndpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop(), TLS: s.etcdClientTLS()})
		return err
	}
	if s.etcd, err = etcdserver.Start(s.cfg.etcdServerConfig()); err != nil {
		return err
	}
	s.cli, err = clientv3.New(clientv3.Config{Endpoints: []string{s.etcd.Endpoint()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop(), TLS: s.etcdClientTLS()})
	return err
}

// openStore opens the WAL store, serves it on the gRPC server (its address
// goes into ledger ensembles) and registers it in etcd.
func (s *Server) openStore(ctx context.Context) error {
	policy, err := wal.ParsePolicy(s.cfg.FsyncPolicy)
	if err != nil {
		return err
	}
	walCfg := wal.Config{Dir: filepath.Join(s.cfg.DataDir, "wal"), SyncInterval: policy.SyncInterval, SyncDelay: policy.SyncDelay,
		SlowSync: s.cfg.SlowSync, Events: s.events, Disk: s.cfg.Disk, SegmentSize: s.cfg.SegmentSize}
	if s.cfg.EncryptionKeyFile != "" {
		if walCfg.Keys, err = wal.LoadKeyFile(s.cfg.EncryptionKeyFile); err != nil {
			return err
		}
	}
	if s.store, err = wal.Open(walCfg); err != nil {
		return fmt.Errorf("open WAL store: %w", err)
	}
	for _, c := range s.store.Corruptions() {
		s.logger.Warn("WAL store: corrupt record, answered UNKNOWN", "store", s.store.StoreID(), "err", c)
	}
	if s.store.MayHideLedgers() {
		s.trustNewLedgers(ctx)
	}
	s.storeService = wal.NewService(s.store)
	walpb.RegisterWALServer(s.grpc, s.storeService)
	// The store's lease has StoreLeaseTTL (default: the ingest lease TTL);
	// registration.go keeps the registration through lease losses.
	rec := storeRecord{StoreID: s.store.StoreID(), Incarnation: s.store.Incarnation(), Address: s.AdvertisedGRPCAddr(),
		MayHideThrough: s.store.MayHideThrough()}
	s.registration, err = startStoreRegistration(ctx, s.cli, rec, s.cfg.StoreLeaseTTL, s.events, s.logger)
	return err
}

// startRoles creates the sequencer, ingest and reader roles and registers
// their gRPC services (before the server starts serving).
func (s *Server) startRoles(ctx context.Context) error {
	if s.cfg.Roles.Sequencer {
		if err := s.startSequencer(ctx); err != nil {
			return err
		}
	} else {
		close(s.done)
	}
	if s.cfg.Roles.Ingest {
		s.cfg.Ingest.LocalStore = s.store.StoreID()
		s.disk = newDiskAdmission(s.store)
		s.cfg.Ingest.Admit = s.disk.admit
		s.cfg.Ingest.Address, s.cfg.Ingest.PeerCredentials = s.AdvertisedGRPCAddr(), s.peerCredentials()
		s.cfg.Ingest.GroupCommitted = func(c *orderlogpb.GroupCommit) {
			if s.consumers != nil {
				s.consumers.ApplyLoggedCommit(c)
			}
		}
		chooser := func(ctx context.Context, w int) ([]ledger.Member, error) {
			return chooseEnsemble(ctx, s.cli, w, s.store.StoreID())
		}
		if err := s.startSchemaChecks(ctx); err != nil {
			return err
		}
		var err error
		if s.ingest, err = ingest.NewNode(ctx, s.cfg.Ingest, s.cli, s.dialer, chooser, ingest.SequencerSessions(s.cli, s.localSequencer, ingest.SessionOptions{Silence: s.cfg.Ingest.GrantStreamSilence, Heard: &s.heard, Credentials: s.peerCredentials()})); err != nil {
			return err
		}
		ingest.NewProducerService(s.ingest).Register(s.grpc)
		ingest.NewPeerService(s.ingest).Register(s.grpc)
	}
	if s.cfg.Roles.Reader || s.cfg.Roles.Ingest { // the HTTP API reads through a local reader
		commits := reader.NewCommitMap()
		go reader.Follow(ctx, s.cli, commits, reader.FollowConfig{Logger: s.logger, Events: s.events, Credentials: s.peerCredentials()})
		entries := reader.NewLedgerSource(s.cli, s.dialer)
		if s.store != nil {
			entries.UseLocalStore(s.store) // pages read in place from its sealed segments
		}
		s.reader = reader.New(commits, entries)
		svc := newService(s.cli, s.ingest, s.reader, s.status)
		reader.NewService(s.reader, svc.partitionFilter).Register(s.grpc)
		s.consumers = consumer.NewService(consumer.Config{Etcd: s.cli, Reader: s.reader, Partitions: svc.partitions,
			Node: s.cfg.NodeName, DefaultTopic: httpapi.DefaultTopic, Logger: s.logger, Context: ctx,
			DescribeAccess: s.auth.groupAccess})
		s.consumers.Register(s.grpc)
	}
	s.startRereplication(ctx) // rereplication.go
	// archive.go
	if err := s.startArchive(ctx); err != nil {
		return fmt.Errorf("archive %s: %w", s.cfg.Archive.URL, err)
	}
	if err := s.registerFlight(); err != nil { // flight.go
		return fmt.Errorf("flight service: %w", err)
	}
	s.startRetention(ctx) // retention.go
	go retention.WatchStart(ctx, s.cli, s.noteLogStart)
	go retention.WatchTopics(ctx, s.cli, s.noteTopics)
	if s.reader != nil {
		go retention.WatchRetained(ctx, s.cli, s.reader.SetRetained)
		go retention.WatchTopicStarts(ctx, s.cli, func(starts retention.TopicStarts) { s.reader.SetTopicStarts(starts) })
	}
	newService(s.cli, s.ingest, s.reader, s.status).register(s.grpc)
	return nil
}

// localSequencer reaches the sequencer leader at addr in process when that
// leader is this process's own sequencer node.
func (s *Server) localSequencer(addr string) sequencer.GrantStreamer {
	if s.sequencerService == nil || addr != s.AdvertisedGRPCAddr() {
		return nil
	}
	return sequencer.LocalGrants(s.sequencerService)
}

// startSequencer creates the sequencer node and campaigns once the stores
// for its commit ledger are registered.
func (s *Server) startSequencer(ctx context.Context) error {
	addr := s.AdvertisedGRPCAddr()
	control := &sequencer.LedgerClient{Etcd: s.cli, Stores: s.dialer, Writer: "sequencer-" + s.cfg.NodeName,
		Replication: sequencer.CommitReplication{AckQuorum: s.cfg.Commit.A, Tolerate: s.cfg.Commit.Tolerate}, Events: s.events}
	var err error
	seqCfg := sequencer.Config{Address: addr, Etcd: s.cli, Logger: s.logger, Events: s.events, Ledgers: control,
		ProbeLeader: sequencer.ProbeGRPCWith(s.peerCredentials()), Heard: &s.heard, Checkpoint: s.cfg.Checkpoint}
	seqCfg.Checkpoint.Floor = s.logStart.Load // checkpoints drop what retention deleted
	s.cfg.Sequencer.apply(&seqCfg)
	s.sequencer, err = sequencer.NewNode(seqCfg)
	if err != nil {
		return err
	}
	s.sequencerService = sequencer.Register(s.grpc, s.sequencer)
	preferred := ""
	if s.store != nil {
		preferred = s.store.StoreID()
	}
	go s.runSequencer(ctx, control, preferred) // stores.go: campaigns once A stores are registered
	return nil
}

// startHTTP serves the observability endpoints (/metrics, /healthz,
// /readyz) on every role, and the HTTP/JSON API with the ingest role.
func (s *Server) startHTTP() error {
	var handler http.Handler
	var mux *http.ServeMux
	closeStreams := func() {}
	if s.ingest != nil {
		svc := httpService{service: newService(s.cli, s.ingest, s.reader, s.status), cutOff: s.readiness.producersRefused, guard: s.auth}
		api, err := httpapi.NewHandler(svc, s.cfg.HTTPLimits)
		if err != nil {
			return err
		}
		if s.consumers != nil { // /v1/consumers/{group}: describe, offsets, stream
			api.SetConsumers(guardedConsumers{Consumers: s.consumers, guard: s.auth})
			closeStreams = api.CloseStreams
		}
		api.SetSchemaVersions(s.schemaChecker.VersionID) // metadata.schema_version on produce
		handler, mux = api, api.Mux()
	} else {
		mux = http.NewServeMux()
		mux.HandleFunc("GET /healthz", serveHealthz)
		handler = mux
	}
	s.mountSchemas(mux)                   // schemas_http.go: /v1/schemas/, the schema registry
	s.mountConsole(mux)                   // console_http.go: /ui/, the web console
	s.mountConsoleCluster(mux)            // console_cluster.go: the leader and the stores' health
	handler = s.auth.httpHandler(handler) // auth_http.go: the /v1 API needs credentials once auth is on
	mux.HandleFunc("GET /readyz", s.readiness.serveReadyz)
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.metricsRegistry(), promhttp.HandlerOpts{}))
	if s.cfg.Pprof {
		registerPprof(mux)
	}
	var err error
	if s.httpLis, err = net.Listen("tcp", s.cfg.HTTPAddr); err != nil {
		return fmt.Errorf("listen HTTP: %w", err)
	}
	// limits_listen.go: one count of connections per address with the gRPC port's
	s.httpLis = s.auth.holdings.listener(s.httpLis)
	handler = bodyDeadline(handler, cmp.Or(s.cfg.HTTPTimeouts.Read, DefaultHTTPReadTimeout)) // httplimits.go
	s.http = &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, MaxHeaderBytes: 1 << 20,
		IdleTimeout: cmp.Or(s.cfg.HTTPTimeouts.Idle, DefaultHTTPIdleTimeout)}
	s.http.RegisterOnShutdown(closeStreams) // consumer streams end, so Shutdown need not wait for them
	s.serveHTTP()
	return nil
}

// metricsRegistry holds the collectors of the roles this process runs.
func (s *Server) metricsRegistry() *prometheus.Registry {
	registry := prometheus.NewRegistry()
	registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if s.ingest != nil {
		registry.MustRegister(s.ingest.Collectors()...)
	}
	registry.MustRegister(newStatusCollector(s), newBoundedCollector(s), s.auth.failures, s.auth.denied, s.auth.throttle, s.auth.holdings.refusals)
	if s.sequencer != nil { // checkpoint age, size, retained commit records
		registry.MustRegister(sequencer.NewCollector(s.sequencer))
	}
	if s.reader != nil { // the commit map's window and chunk cache
		registry.MustRegister(reader.NewCollector(s.reader.Commits()))
	}
	if s.consumers != nil {
		registry.MustRegister(s.consumers.Collector())
	}
	if s.store != nil {
		registry.MustRegister(newStoreCollector(s.store), newDiskCollector(s.store))
	}
	if s.disk != nil {
		registry.MustRegister(s.disk.refused)
	}
	if s.retentionMetrics != nil {
		registry.MustRegister(s.retentionMetrics.Collectors()...)
	}
	if s.tieringMetrics != nil {
		registry.MustRegister(s.tieringMetrics.Collectors()...)
	}
	return registry
}

// GRPCAddr and HTTPAddr are where the server listens.
func (s *Server) GRPCAddr() string { return s.grpcLis.Addr().String() }

// AdvertisedGRPCAddr is the gRPC address others are given
// (Config.AdvertiseGRPC, else the listen address).
func (s *Server) AdvertisedGRPCAddr() string {
	if s.cfg.AdvertiseGRPC != "" {
		return s.cfg.AdvertiseGRPC
	}
	return s.GRPCAddr()
}
func (s *Server) HTTPAddr() string { return s.httpLis.Addr().String() }

// EtcdEndpoint is the embedded etcd server's client URL.
func (s *Server) EtcdEndpoint() string { return s.etcd.Endpoint() }

// WaitReady blocks until Ready answers nil (every role of the process is
// ready) or ctx ends.
func (s *Server) WaitReady(ctx context.Context) error {
	for {
		err := s.Ready()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("orderlog did not become ready: %w (%v)", ctx.Err(), err)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Close stops every role, then the store and etcd.
func (s *Server) Close() {
	if s.readiness != nil {
		s.readiness.health.Shutdown() // NOT_SERVING from now on: clients move away first
	}
	if s.http != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = s.http.Shutdown(ctx)
		cancel()
	}
	if s.ingest != nil {
		s.ingest.Close()
	}
	if s.cancel != nil {
		s.cancel()
	}
	s.watches.Wait()
	if s.sequencer != nil {
		<-s.done
	}
	if s.grpc != nil {
		s.grpc.Stop()
	}
	if s.grpcDialer != nil {
		s.grpcDialer.Close()
	}
	if s.store != nil {
		if s.registration != nil { // no ensemble should choose a store that is gone
			s.registration.close()
		}
		s.store.Close()
	}
	if s.cli != nil {
		s.cli.Close()
	}
	if s.etcd != nil {
		s.etcd.Close()
	}
	if s.dataLock != nil {
		s.dataLock.Close() // the kernel drops the flock with the file
	}
}

// lockDataDir takes an exclusive flock on <data>/LOCK: a second process on
// the same directory would otherwise block, without a word, in the
// embedded etcd's own lock.
func (s *Server) lockDataDir() error {
	if s.cfg.DataDir == "" {
		return nil
	}
	if err := os.MkdirAll(s.cfg.DataDir, 0o755); err != nil {
		return err
	}
	f, err := wal.LockDirectory(s.cfg.DataDir)
	if errors.Is(err, wal.ErrLocked) {
		return fmt.Errorf("node: data directory %s is in use by another orderlog process", s.cfg.DataDir)
	}
	s.dataLock = f
	return err
}
