// Package etcdserver runs a real embedded etcd server for single-machine
// orderlog (`orderlog dev`) and for tests.
//
// It owns only the server's lifecycle. It must never be used for a
// multi-node deployment: a cluster runs a real etcd cluster and orderlog
// nodes connect to it as clients.
package etcdserver

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// ErrNotReady is returned by Start when the server does not become ready in
// time (for example because its data directory is locked by another process).
var ErrNotReady = errors.New("etcdserver: server did not become ready")

// Config says where the server keeps its data and where it listens.
type Config struct {
	// Dir is the data directory; it is created if missing.
	Dir string
	// ClientAddr is host:port for clients; port 0 picks a free port.
	ClientAddr string
	// ReadyTimeout bounds how long Start waits for the server.
	ReadyTimeout time.Duration
}

// Validate fills defaults and rejects nonsense.
func (c *Config) Validate() error {
	if c.Dir == "" {
		return errors.New("etcdserver: Dir is required")
	}
	if c.ClientAddr == "" {
		c.ClientAddr = "127.0.0.1:0"
	}
	if c.ReadyTimeout == 0 {
		c.ReadyTimeout = 30 * time.Second
	}
	return nil
}

// Server is a running embedded etcd server.
type Server struct {
	etcd *embed.Etcd
}

// Start starts the server and waits until it serves clients.
func Start(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	peerPort, err := freePort()
	if err != nil {
		return nil, fmt.Errorf("pick peer port: %w", err)
	}
	ec := embed.NewConfig()
	ec.Dir = cfg.Dir
	ec.Name = "orderlog"
	// embed logs expected shutdown errors at "error"; orderlog reports
	// what matters itself.
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	clientURL := url.URL{Scheme: "http", Host: cfg.ClientAddr}
	peerURL := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", peerPort)}
	ec.ListenClientUrls = []url.URL{clientURL}
	ec.AdvertiseClientUrls = []url.URL{clientURL}
	ec.ListenPeerUrls = []url.URL{peerURL}
	ec.AdvertisePeerUrls = []url.URL{peerURL}
	ec.InitialCluster = ec.InitialClusterFromName(ec.Name)
	// orderlog keeps only small, slowly changing state in etcd, but CAS-heavy
	// keys (reservations, epochs) still accumulate revisions: compact hourly.
	ec.AutoCompactionMode = embed.CompactorModePeriodic
	ec.AutoCompactionRetention = "1h"

	e, err := embed.StartEtcd(ec)
	if err != nil {
		return nil, fmt.Errorf("start embedded etcd: %w", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(cfg.ReadyTimeout):
		e.Close()
		return nil, ErrNotReady
	}
	return &Server{etcd: e}, nil
}

// Endpoint is the client URL, with the real port when port 0 was asked for.
func (s *Server) Endpoint() string {
	return "http://" + s.etcd.Clients[0].Addr().String()
}

// NewClient returns a client connected to this server. Close every client
// before Close, or Close blocks for several seconds.
func (s *Server) NewClient() (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{
		Endpoints:   []string{s.Endpoint()},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(), // retries during failover are expected
	})
}

// Close stops the server.
func (s *Server) Close() { s.etcd.Close() }

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
