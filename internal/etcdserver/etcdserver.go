// Package etcdserver runs a real embedded etcd server: the single member of
// `orderlog dev` and of tests, or one member of a multi-member etcd cluster
// inside each `orderlog node` process (three node processes are then a
// complete cluster; etcd's own raft is the consensus).
//
// It owns only the server's lifecycle and the parsing of member lists. It
// must never implement any consensus of its own.
package etcdserver

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"orderlog/internal/tlsconfig"
)

// ErrNotReady is returned by Start when the server does not become ready in
// time (for example because its data directory is locked by another process,
// or because too few members of its cluster are up to form a quorum).
var ErrNotReady = errors.New("etcdserver: server did not become ready")

// Cluster states of a member's first start (ignored once its data
// directory holds a member: a restarted member rejoins with its data).
const (
	// StateNew: the member is one of the initial cluster's founders.
	StateNew = embed.ClusterStateFlagNew
	// StateExisting: the member joins a running cluster that already lists
	// it (`etcdctl member add`), for example to replace a lost node.
	StateExisting = embed.ClusterStateFlagExisting
)

// Config says where the server keeps its data and where it listens.
type Config struct {
	// Dir is the data directory; it is created if missing.
	Dir string
	// Name is the member's name; default "orderlog". In a multi-member
	// cluster it must be this member's name in InitialCluster.
	Name string
	// ClientAddr is host:port for clients; port 0 picks a free port.
	ClientAddr string
	// PeerAddr is the host:port the member listens on for its peers. Default:
	// this member's address in InitialCluster, or a free loopback port for a
	// single member.
	PeerAddr string
	// InitialCluster lists every founding member, "name=http://host:port,..."
	// (https:// with TLS), each with the peer URL its peers reach it at.
	// Empty: a single member.
	InitialCluster string
	// ClusterState is StateNew (default) or StateExisting.
	ClusterState string
	// ReadyTimeout bounds how long Start waits for the server (in a
	// multi-member cluster, for a quorum of members). Default 30 s for a
	// single member, 10 min for a cluster.
	ReadyTimeout time.Duration
	// TLS, if set, serves clients and peers over TLS with these files: both
	// must present a certificate that chains to its CA, and peers one
	// that names the address they connect from (etcd checks it). The
	// server reads the certificate and key again at each handshake, the
	// CA only at Start. Every InitialCluster URL must then be https://.
	// The server's own clients (NewClient) use it too. Zero: plaintext.
	TLS tlsconfig.Config
}

// Validate fills defaults and rejects nonsense.
func (c *Config) Validate() error {
	if c.Dir == "" {
		return errors.New("etcdserver: Dir is required")
	}
	if c.Name == "" {
		c.Name = "orderlog"
	}
	if err := c.TLS.ValidateServer(); err != nil {
		return err
	}
	if c.ClientAddr == "" {
		c.ClientAddr = "127.0.0.1:0"
	}
	switch c.ClusterState {
	case "":
		c.ClusterState = StateNew
	case StateNew, StateExisting:
	default:
		return fmt.Errorf("etcdserver: cluster state %q: want %q or %q", c.ClusterState, StateNew, StateExisting)
	}
	if c.InitialCluster != "" {
		members, err := ParseInitialCluster(c.InitialCluster)
		if err != nil {
			return err
		}
		self, ok := members[c.Name]
		if !ok {
			return fmt.Errorf("etcdserver: member %q is not in the initial cluster %q", c.Name, c.InitialCluster)
		}
		for _, name := range MemberNames(members) {
			if u := members[name]; u.Scheme != c.scheme() {
				return fmt.Errorf("etcdserver: member %s's peer URL %s: want %s:// (TLS %v)", name, u.String(), c.scheme(), c.TLS.Enabled())
			}
		}
		if c.PeerAddr == "" {
			c.PeerAddr = self.Host
		}
	}
	if c.ReadyTimeout == 0 {
		c.ReadyTimeout = 30 * time.Second
		if c.Members() > 1 {
			c.ReadyTimeout = 10 * time.Minute
		}
	}
	return nil
}

// scheme is the URL scheme of the server's client and peer URLs.
func (c *Config) scheme() string {
	if c.TLS.Enabled() {
		return "https"
	}
	return "http"
}

// Members is how many founding members the cluster has (1 without
// InitialCluster).
func (c *Config) Members() int {
	members, err := ParseInitialCluster(c.InitialCluster)
	if err != nil || len(members) == 0 {
		return 1
	}
	return len(members)
}

// ParseInitialCluster parses "name=http://host:port,..." into each member's
// peer URL. A member may appear once only.
func ParseInitialCluster(s string) (map[string]url.URL, error) {
	out := map[string]url.URL{}
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	for _, part := range strings.Split(s, ",") {
		name, raw, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok || name == "" {
			return nil, fmt.Errorf("etcdserver: initial cluster entry %q: want name=http://host:port", part)
		}
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Port() == "" {
			return nil, fmt.Errorf("etcdserver: initial cluster entry %q: want name=http://host:port", part)
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("etcdserver: member %q appears twice in the initial cluster", name)
		}
		out[name] = *u
	}
	return out, nil
}

// MemberNames are the initial cluster's member names, sorted.
func MemberNames(members map[string]url.URL) []string {
	names := make([]string, 0, len(members))
	for name := range members {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// Server is a running embedded etcd server.
type Server struct {
	etcd *embed.Etcd
	tls  *tlsconfig.Source // nil: plaintext
}

// Start starts the server and waits until it serves clients.
func Start(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ec, err := embedConfig(cfg)
	if err != nil {
		return nil, err
	}
	var source *tlsconfig.Source
	if cfg.TLS.Enabled() {
		if source, err = tlsconfig.Load(cfg.TLS); err != nil {
			return nil, err
		}
	}
	e, err := embed.StartEtcd(ec)
	if err != nil {
		if source != nil { // etcd only logs why a peer refused this member
			if refused := peerHandshakeError(cfg, source); refused != nil {
				return nil, fmt.Errorf("start embedded etcd: %w (%v)", err, refused)
			}
		}
		return nil, fmt.Errorf("start embedded etcd: %w", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(cfg.ReadyTimeout):
		e.Close()
		return nil, ErrNotReady
	}
	return &Server{etcd: e, tls: source}, nil
}

// embedConfig maps cfg onto etcd's own configuration.
func embedConfig(cfg Config) (*embed.Config, error) {
	ec := embed.NewConfig()
	ec.Dir = cfg.Dir
	ec.Name = cfg.Name
	// embed logs expected shutdown errors at "error"; orderlog reports
	// what matters itself.
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	peerAddr := cfg.PeerAddr
	if peerAddr == "" {
		port, err := freePort()
		if err != nil {
			return nil, fmt.Errorf("pick peer port: %w", err)
		}
		peerAddr = fmt.Sprintf("127.0.0.1:%d", port)
	}
	clientURL := url.URL{Scheme: cfg.scheme(), Host: cfg.ClientAddr}
	ec.ListenClientUrls = []url.URL{clientURL}
	ec.AdvertiseClientUrls = []url.URL{advertised(clientURL, peerAddr)}
	ec.ListenPeerUrls = []url.URL{{Scheme: cfg.scheme(), Host: peerAddr}}
	if cfg.TLS.Enabled() {
		info := transport.TLSInfo{CertFile: cfg.TLS.CertFile, KeyFile: cfg.TLS.KeyFile, TrustedCAFile: cfg.TLS.CAFile, ClientCertAuth: true}
		ec.ClientTLSInfo, ec.PeerTLSInfo = info, info
	}
	if cfg.InitialCluster == "" {
		ec.AdvertisePeerUrls = ec.ListenPeerUrls
		ec.InitialCluster = ec.InitialClusterFromName(ec.Name)
	} else {
		members, _ := ParseInitialCluster(cfg.InitialCluster) // checked by Validate
		ec.AdvertisePeerUrls = []url.URL{members[cfg.Name]}
		ec.InitialCluster = cfg.InitialCluster
		ec.InitialClusterToken = "orderlog"
	}
	ec.ClusterState = cfg.ClusterState
	// orderlog keeps only small, slowly changing state in etcd, but CAS-heavy
	// keys (reservations, epochs) still accumulate revisions: compact hourly.
	ec.AutoCompactionMode = embed.CompactorModePeriodic
	ec.AutoCompactionRetention = "1h"
	return ec, nil
}

// advertised is the client URL peers and clients can reach: a listen
// address on every interface is advertised with the peer address's host.
func advertised(listen url.URL, peerAddr string) url.URL {
	host, port, err := net.SplitHostPort(listen.Host)
	if err != nil || (host != "" && !net.ParseIP(host).IsUnspecified()) {
		return listen
	}
	peerHost, _, _ := net.SplitHostPort(peerAddr)
	if peerHost == "" || net.ParseIP(peerHost) != nil && net.ParseIP(peerHost).IsUnspecified() {
		peerHost = "127.0.0.1"
	}
	listen.Host = net.JoinHostPort(peerHost, port)
	return listen
}

// HasMember says whether dir holds a member's data (a restart rejoins with
// it; InitialCluster and ClusterState are then ignored).
func HasMember(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "member"))
	return err == nil
}

// Endpoint is the client URL, with the real port when port 0 was asked for.
func (s *Server) Endpoint() string {
	return s.scheme() + "://" + s.etcd.Clients[0].Addr().String()
}

// PeerAddr is the host:port the member listens on for its peers.
func (s *Server) PeerAddr() string {
	return s.etcd.Peers[0].Addr().String()
}

func (s *Server) scheme() string {
	if s.tls != nil {
		return "https"
	}
	return "http"
}

// NewClient returns a client connected to this server (with the server's
// own certificate under TLS). Close every client before Close, or Close
// blocks for several seconds.
func (s *Server) NewClient() (*clientv3.Client, error) {
	cfg := clientv3.Config{
		Endpoints:   []string{s.Endpoint()},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(), // retries during failover are expected
	}
	if s.tls != nil {
		cfg.TLS = s.tls.ClientConfig()
	}
	return clientv3.New(cfg)
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
