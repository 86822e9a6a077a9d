package node

import (
	"fmt"
	"path/filepath"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"orderlog/ingest"
	"orderlog/internal/etcdserver"
	"orderlog/sequencer"
)

// EtcdMember makes the process's embedded etcd server one member of a
// multi-member etcd cluster (`orderlog node`): three such processes are a
// complete cluster, with etcd's raft as the consensus.
type EtcdMember struct {
	// InitialCluster lists every founding member, "name=http://host:port,..."
	// (peer URLs); the member's own name is Config.NodeName. Empty: a
	// single-member server (`orderlog dev`).
	InitialCluster string
	// PeerAddr is where the member listens for its peers; default its
	// address in InitialCluster.
	PeerAddr string
	// ClusterState is "new" (a founder; default) or "existing" (joining a
	// running cluster that lists it already). A member whose data
	// directory holds a member rejoins with it whatever this says.
	ClusterState string
}

// SequencerTimeouts tune the sequencer role; a zero field takes the
// sequencer's default.
type SequencerTimeouts struct {
	// ElectionTTL is the election session's etcd lease TTL, in whole
	// seconds: a leader that dies is replaced about this long after.
	// Default 2 s.
	ElectionTTL time.Duration
	// SessionTimeout is how long an ingest node's grant stream may stay
	// silent before its session is dead. Default
	// sequencer.DefaultSessionTimeout.
	SessionTimeout time.Duration
	// GrantLease is how long a grant may stay unresolved before its ledger
	// is closed. Default sequencer.DefaultGrantLease.
	GrantLease time.Duration
	// CloseTimeout is how long a writer asked to close a ledger has before
	// the sequencer recovers it. Default sequencer.DefaultCloseTimeout.
	CloseTimeout time.Duration
}

// apply sets the timeouts on cfg.
func (t SequencerTimeouts) apply(cfg *sequencer.Config) {
	cfg.SessionTTL = int(t.ElectionTTL / time.Second)
	cfg.Machine.SessionTimeout = t.SessionTimeout
	cfg.Machine.GrantLease = t.GrantLease
	cfg.Machine.CloseTimeout = t.CloseTimeout
}

func (t SequencerTimeouts) validate() error {
	if t.ElectionTTL < 0 || t.ElectionTTL%time.Second != 0 {
		return fmt.Errorf("node: sequencer election TTL %s: want a whole number of seconds", t.ElectionTTL)
	}
	if t.SessionTimeout < 0 || t.GrantLease < 0 || t.CloseTimeout < 0 {
		return fmt.Errorf("node: sequencer timeouts must be positive")
	}
	return nil
}

// DefaultReplication is the replication of a cluster of nodes stores: a
// majority of min(nodes, 3) — W = A = 1 for one node, 2/2 for two, 3/2
// (one failure tolerated) for three or more.
func DefaultReplication(nodes int) Replication {
	w := min(max(nodes, 1), 3)
	a := w/2 + 1
	return Replication{W: w, A: a, Tolerate: w - a}
}

// Nodes is how many nodes the cluster has, as far as the process knows:
// the size of the embedded etcd member's initial cluster, or 0 (unknown)
// with an external etcd cluster or a single-member server (whose etcd
// other processes may share).
func (c *Config) Nodes() int {
	if c.Member.InitialCluster == "" {
		return 0
	}
	cfg := etcdserver.Config{InitialCluster: c.Member.InitialCluster}
	return cfg.Members()
}

// validateCluster checks the embedded member's settings, fills the
// replication its cluster defaults to (the ingest ledgers' from the node
// count, the commit ledger's the same), and refuses a W no ledger could
// ever have. It runs before the roles' own validation.
func (c *Config) validateCluster() error {
	if c.Member.InitialCluster == "" {
		return c.Sequencer.validate()
	}
	if len(c.EtcdEndpoints) > 0 {
		return fmt.Errorf("node: an external etcd cluster and an embedded member's initial cluster are exclusive")
	}
	member := c.etcdServerConfig()
	if err := member.Validate(); err != nil {
		return err
	}
	nodes := c.Nodes()
	if c.Ingest.W == 0 {
		d := DefaultReplication(nodes)
		c.Ingest.W, c.Ingest.A, c.Ingest.Tolerate = d.W, d.A, d.Tolerate
	}
	if c.Commit.W == 0 {
		c.Commit = Replication{W: c.Ingest.W, A: c.Ingest.A, Tolerate: c.Ingest.Tolerate}
	}
	if c.Roles.Ingest && c.Ingest.W > nodes {
		return fmt.Errorf("node: W=%d stores per ledger, but the cluster has %d node(s)", c.Ingest.W, nodes)
	}
	if c.Roles.Sequencer && c.Commit.W > nodes {
		return fmt.Errorf("node: commit ledger W=%d, but the cluster has %d node(s)", c.Commit.W, nodes)
	}
	return c.Sequencer.validate()
}

// validateStoreLease fills the store lease TTL (default: the ingest node's
// lease TTL, itself ingest.DefaultLeaseTTL by default).
func (c *Config) validateStoreLease() error {
	if c.StoreLeaseTTL == 0 {
		c.StoreLeaseTTL = c.Ingest.LeaseTTL
	}
	if c.StoreLeaseTTL == 0 {
		c.StoreLeaseTTL = ingest.DefaultLeaseTTL
	}
	if c.StoreLeaseTTL%time.Second != 0 || c.StoreLeaseTTL < 2*time.Second {
		return fmt.Errorf("node: store lease TTL %s: want whole seconds, at least etcd's 2 s floor", c.StoreLeaseTTL)
	}
	return nil
}

// etcdServerConfig is the embedded etcd server's configuration.
func (c *Config) etcdServerConfig() etcdserver.Config {
	cfg := etcdserver.Config{Dir: c.etcdDir(), ClientAddr: c.EtcdAddr, TLS: c.TLS.Config}
	if c.Member.InitialCluster != "" {
		cfg.Name, cfg.InitialCluster = c.NodeName, c.Member.InitialCluster
		cfg.PeerAddr, cfg.ClusterState = c.Member.PeerAddr, c.Member.ClusterState
	}
	return cfg
}

func (c *Config) etcdDir() string { return filepath.Join(c.DataDir, "etcd") }

// grpcServerKeepalive lets clients ping as often as the ingest node's
// grant-stream keepalive does (gRPC's default policy answers a ping more
// often than every 5 minutes with GOAWAY), and pings idle clients itself.
func grpcServerKeepalive() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
	}
}
