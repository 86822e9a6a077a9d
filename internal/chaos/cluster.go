package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"orderlog/ingest/ledger"
	"orderlog/internal/keys"
)

// Node is one `orderlog node` process of a Cluster.
type Node struct {
	Name string
	Dir  string // its --data directory
	// The node's own listen addresses; its etcd peers reach it through
	// PeerProxy (the address --etcd-initial-cluster names). GRPCAddr is
	// GRPCProxy's address, which the node advertises (--grpc-advertise):
	// the other nodes' gRPC traffic to it (stores, grants, Release) and
	// the clients' go through the proxy; it listens on grpcListen.
	GRPCAddr, HTTPAddr, EtcdClient, EtcdPeer string
	PeerProxy, GRPCProxy                     *Proxy
	grpcListen                               string
	args                                     []string

	cmd    *exec.Cmd
	exited chan struct{}
	paused bool
}

// Cluster supervises N node processes started from one binary.
type Cluster struct {
	Nodes  []*Node
	binary string
	logDir string

	mu struct {
		sync.Mutex
		pids map[string]int // running nodes
	}
}

// NewCluster lays out n nodes under dir (free loopback ports, one peer
// proxy per node) without starting them. extraArgs go to every node.
func NewCluster(binary, dir string, n int, extraArgs []string) (*Cluster, error) {
	c := &Cluster{binary: binary, logDir: dir}
	c.mu.pids = make(map[string]int)
	var members []string
	// Every port, the nodes' and the proxies', is reserved at once: a
	// proxy listening on a port of its own choosing could take a node's
	// port freed a moment before, and that node would not start (or,
	// restarted, would find its port taken).
	ports, err := freePorts(6 * n)
	if err != nil {
		return nil, err
	}
	for i := range n {
		node := &Node{Name: fmt.Sprintf("n%d", i+1), Dir: filepath.Join(dir, fmt.Sprintf("n%d", i+1))}
		p := ports[6*i : 6*i+6]
		node.grpcListen, node.HTTPAddr, node.EtcdClient, node.EtcdPeer = p[0], p[1], p[2], p[3]
		if node.PeerProxy, err = NewProxy(p[4], node.EtcdPeer, c.owner); err != nil {
			return nil, err
		}
		if node.GRPCProxy, err = NewProxy(p[5], node.grpcListen, c.owner); err != nil {
			return nil, err
		}
		node.GRPCAddr = node.GRPCProxy.Addr()
		members = append(members, node.Name+"=http://"+node.PeerProxy.Addr())
		c.Nodes = append(c.Nodes, node)
	}
	for _, node := range c.Nodes {
		node.args = append([]string{"node", "--name", node.Name, "--data", node.Dir,
			"--grpc-addr", node.grpcListen, "--grpc-advertise", node.GRPCAddr, "--http-addr", node.HTTPAddr,
			"--etcd-listen-client", node.EtcdClient, "--etcd-listen-peer", node.EtcdPeer,
			"--etcd-initial-cluster", strings.Join(members, ",")}, extraArgs...)
	}
	return c, nil
}

// freePorts returns n distinct free loopback addresses below the
// kernel's ephemeral port range: a port in that range that no one listens
// on (a killed node's, until it restarts) may become the local end of any
// outgoing connection on the machine, and the node could not listen on it
// again.
func freePorts(n int) ([]string, error) {
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
	}()
	low, high := belowEphemeral()
	var addrs []string
	for tries := 0; len(addrs) < n; tries++ {
		if tries > 100*n {
			return nil, fmt.Errorf("no %d free loopback ports in [%d, %d)", n, low, high)
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", low+rand.IntN(high-low)))
		if err != nil {
			continue // taken
		}
		listeners = append(listeners, l)
		addrs = append(addrs, l.Addr().String())
	}
	return addrs, nil
}

// belowEphemeral is a port range under /proc/sys/net/ipv4/ip_local_port_range.
func belowEphemeral() (low, high int) {
	high = 32768 // Linux's default start of the ephemeral range
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil && v > 2048 {
				high = v
			}
		}
	}
	return max(1024, high-16384), high
}

// owner names the node process that dialled conn ("" for any other).
func (c *Cluster) owner(conn net.Conn) string {
	c.mu.Lock()
	pids := make(map[string]int, len(c.mu.pids))
	for name, pid := range c.mu.pids {
		pids[name] = pid
	}
	c.mu.Unlock()
	return socketOwner(conn, pids)
}

// Node returns the node named name.
func (c *Cluster) Node(name string) *Node {
	for _, n := range c.Nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// GRPCAddrs and HTTPAddrs list every node's API addresses.
func (c *Cluster) GRPCAddrs() []string {
	var out []string
	for _, n := range c.Nodes {
		out = append(out, n.GRPCAddr)
	}
	return out
}

// Start starts node's process (its output goes to <logDir>/<name>.log).
func (c *Cluster) Start(node *Node) error {
	if err := os.MkdirAll(node.Dir, 0o755); err != nil {
		return err
	}
	logFile, err := os.OpenFile(c.LogPath(node), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close()
	fmt.Fprintf(logFile, "=== chaos: start %s at %s\n", node.Name, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(c.binary, node.args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", node.Name, err)
	}
	node.cmd = cmd
	node.exited, node.paused = make(chan struct{}), false
	exited := node.exited
	go func() { _ = cmd.Wait(); close(exited) }()
	c.mu.Lock()
	c.mu.pids[node.Name] = node.cmd.Process.Pid
	c.mu.Unlock()
	return nil
}

// LogPath is where node's output goes.
func (c *Cluster) LogPath(node *Node) string { return filepath.Join(c.logDir, node.Name+".log") }

// Running says whether node's process runs (paused or not).
func (n *Node) Running() bool {
	if n.cmd == nil {
		return false
	}
	select {
	case <-n.exited:
		return false
	default:
		return true
	}
}

// Kill sends SIGKILL to node's process and waits until it is gone.
func (c *Cluster) Kill(node *Node) {
	if !node.Running() {
		return
	}
	_ = node.cmd.Process.Signal(syscall.SIGKILL)
	<-node.exited
	node.paused = false
	c.mu.Lock()
	delete(c.mu.pids, node.Name)
	c.mu.Unlock()
}

// Pause stops node's process with SIGSTOP; Resume continues it.
func (c *Cluster) Pause(node *Node) {
	if node.Running() && node.cmd.Process.Signal(syscall.SIGSTOP) == nil {
		node.paused = true
	}
}

func (c *Cluster) Resume(node *Node) {
	if node.Running() && node.cmd.Process.Signal(syscall.SIGCONT) == nil {
		node.paused = false
	}
}

// Partition cuts node off from every other node, both ways: etcd raft
// traffic and gRPC (store replication, grant streams, Release); open
// connections are closed and new ones refused. Heal joins it again.
// Clients (this process) still reach every node.
func (c *Cluster) Partition(node *Node) {
	for _, other := range c.Nodes {
		if other == node {
			continue
		}
		for _, p := range []*Proxy{node.PeerProxy, node.GRPCProxy} {
			p.Block(other.Name)
		}
		for _, p := range []*Proxy{other.PeerProxy, other.GRPCProxy} {
			p.Block(node.Name)
		}
	}
}

func (c *Cluster) Heal(node *Node) {
	for _, other := range c.Nodes {
		if other == node {
			continue
		}
		for _, p := range []*Proxy{node.PeerProxy, node.GRPCProxy} {
			p.Unblock(other.Name)
		}
		for _, p := range []*Proxy{other.PeerProxy, other.GRPCProxy} {
			p.Unblock(node.Name)
		}
	}
}

// WipeWAL deletes node's WAL directory (its store's disk is lost); the
// node must be down.
func (c *Cluster) WipeWAL(node *Node) error {
	if node.Running() {
		return fmt.Errorf("wipe %s: node is running", node.Name)
	}
	return os.RemoveAll(filepath.Join(node.Dir, "wal"))
}

// FlipByte flips one byte in a record of node's newest WAL segment that
// has records (docs/format/wal.md: records start at byte 56); the node
// must be down. It returns the file and position.
func (c *Cluster) FlipByte(node *Node, rng *rand.Rand) (string, int64, error) {
	if node.Running() {
		return "", 0, fmt.Errorf("flip a byte of %s: node is running", node.Name)
	}
	segments, _ := filepath.Glob(filepath.Join(node.Dir, "wal", "*.seg"))
	sort.Sort(sort.Reverse(sort.StringSlice(segments)))
	const headerSize, minRecord = 56, 52
	for _, path := range segments {
		info, err := os.Stat(path)
		if err != nil || info.Size() < headerSize+minRecord {
			continue
		}
		pos := headerSize + rng.Int64N(info.Size()-headerSize)
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			return "", 0, err
		}
		defer f.Close()
		b := make([]byte, 1)
		if _, err := f.ReadAt(b, pos); err != nil {
			return "", 0, err
		}
		b[0] ^= 0xff
		if _, err := f.WriteAt(b, pos); err != nil {
			return "", 0, err
		}
		return path, pos, f.Sync()
	}
	return "", 0, errors.New("no WAL segment with records")
}

// WaitProtected waits until the cluster tolerates its next fault again:
// every ledger in states (ingest and commit ledgers) has a full ensemble
// of stores registered in the incarnations it names. A node that comes
// back has its open ledgers re-protected within about a second (degraded
// ledgers roll once a full ensemble is registered, a wiped store's ledgers
// roll off it), and its closed ones at the re-replication worker's next
// pass (every 10 s); a fault inside that window is a second fault on top
// of the first, which W=3, A=2 does not promise to survive without waiting
// (a new sequencer leader replays every commit ledger).
func (c *Cluster) WaitProtected(ctx context.Context, states ...ledger.State) error {
	cli, _, err := c.etcdClient()
	if err != nil {
		return err
	}
	defer cli.Close()
	for {
		weak, err := c.weakLedgers(ctx, cli, states)
		if err == nil && len(weak) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("ledgers %v not on a full ensemble of registered stores (%v): %w", weak, err, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// weakLedgers lists the ledgers that are degraded, name a store
// incarnation that is not registered, name a store lost for good, or are
// open on a damaged store.
func (c *Cluster) weakLedgers(ctx context.Context, cli *clientv3.Client, states []ledger.State) ([]uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	open, err := ledger.List(ctx, cli, ledger.Filter{States: states})
	if err != nil {
		return nil, err
	}
	live, err := ledger.LiveStores(ctx, cli)
	if err != nil {
		return nil, err
	}
	registered := make(map[ledger.Member]bool, len(live))
	for _, m := range live {
		registered[ledger.Member{StoreID: m.StoreID, Incarnation: m.Incarnation}] = true
	}
	var weak []uint64
	for _, m := range open {
		sound := !m.Degraded()
		for _, member := range m.Ensemble {
			sound = sound && registered[ledger.Member{StoreID: member.StoreID, Incarnation: member.Incarnation}]
		}
		// A wiped store's old registration lingers until its lease
		// expires: the newest store at its address tells.
		_, lost := ledger.AnyLost(m.Ensemble, live)
		sound = sound && !lost
		// An open ledger on a store whose journal damage may hide its
		// records has one trustworthy copy fewer until its owner rolls it
		// (ledger.Weakness): one created just before the damaged store
		// registered is not among those WaitClosed waits for.
		if m.State == ledger.StateOpen {
			_, damaged := ledger.DamagedMember(m, live)
			sound = sound && !damaged
		}
		if !sound {
			weak = append(weak, m.ID)
		}
	}
	return weak, nil
}

// OpenLedgersOn lists the open ledgers with a member at node's address.
func (c *Cluster) OpenLedgersOn(ctx context.Context, node *Node) ([]uint64, error) {
	cli, _, err := c.etcdClient()
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	open, err := ledger.List(ctx, cli, ledger.Filter{States: []ledger.State{ledger.StateOpen}})
	if err != nil {
		return nil, err
	}
	var ids []uint64
	for _, m := range open {
		for _, member := range m.Ensemble {
			if member.Address == node.GRPCAddr {
				ids = append(ids, m.ID)
				break
			}
		}
	}
	return ids, nil
}

// WaitClosed waits until none of the ledgers ids is open any more. After a
// node comes back with damage in its journal, its store cannot answer for
// the tails of the ledgers the damage may have held: they are re-protected
// once their writers rolled them (at their next append, refused with
// ADD_DAMAGED), which etcd does not show as WaitProtected's registrations.
func (c *Cluster) WaitClosed(ctx context.Context, ids []uint64) error {
	cli, _, err := c.etcdClient()
	if err != nil {
		return err
	}
	defer cli.Close()
	for {
		var open []uint64
		for _, id := range ids {
			m, err := ledger.Get(ctx, cli, id)
			if err != nil || m.State != ledger.StateClosed {
				open = append(open, id)
			}
		}
		if len(open) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("ledgers %v still open: %w", open, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// WaitReady waits until every running node's /readyz answers 200.
func (c *Cluster) WaitReady(ctx context.Context) error {
	for {
		var notReady []string
		for _, n := range c.Nodes {
			if n.Running() && !n.paused && !httpReady(ctx, n.HTTPAddr) {
				notReady = append(notReady, n.Name)
			}
		}
		if len(notReady) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("nodes %v not ready: %w", notReady, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func httpReady(ctx context.Context, addr string) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/readyz", nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// etcdClient connects to the etcd members of the running, unpaused nodes.
func (c *Cluster) etcdClient() (*clientv3.Client, []*Node, error) {
	var endpoints []string
	var nodes []*Node
	for _, n := range c.Nodes {
		if n.Running() && !n.paused {
			endpoints = append(endpoints, n.EtcdClient)
			nodes = append(nodes, n)
		}
	}
	if len(endpoints) == 0 {
		return nil, nil, errors.New("no node runs")
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	return cli, nodes, err
}

// EtcdWritable returns how long after since a write first succeeded on the
// etcd members of the nodes other than faulty: etcd's own recovery from
// the fault, the reference the harness sets writes' recovery against
// (orderlog can write no sooner than etcd can elect). It gives up at
// deadline and returns -1 (shown as "n/a").
func (c *Cluster) EtcdWritable(ctx context.Context, faulty *Node, since time.Time, deadline time.Duration) time.Duration {
	var endpoints []string
	for _, n := range c.Nodes {
		if n != faulty {
			endpoints = append(endpoints, n.EtcdClient)
		}
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: time.Second, Logger: zap.NewNop()})
	if err != nil {
		return -1
	}
	defer cli.Close()
	for time.Since(since) < deadline && ctx.Err() == nil {
		pctx, cancel := context.WithTimeout(ctx, 250*time.Millisecond)
		_, err := cli.Put(pctx, "chaos/etcd-probe", since.String())
		cancel()
		if err == nil {
			return time.Since(since)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return -1
}

// SequencerLeader is the node whose sequencer leads (the oldest election
// key), or nil.
func (c *Cluster) SequencerLeader(ctx context.Context) *Node {
	cli, _, err := c.etcdClient()
	if err != nil {
		return nil
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, keys.SeqElection+"/", clientv3.WithFirstCreate()...)
	if err != nil || len(resp.Kvs) == 0 {
		return nil
	}
	addr := string(resp.Kvs[0].Value)
	for _, n := range c.Nodes {
		if n.GRPCAddr == addr {
			return n
		}
	}
	return nil
}

// EtcdLeader is the node whose etcd member is the raft leader, or nil.
func (c *Cluster) EtcdLeader(ctx context.Context) *Node {
	cli, nodes, err := c.etcdClient()
	if err != nil {
		return nil
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	for _, n := range nodes {
		status, err := cli.Status(ctx, n.EtcdClient)
		if err != nil {
			continue
		}
		members, err := cli.MemberList(ctx)
		if err != nil {
			return nil
		}
		for _, m := range members.Members {
			if m.ID == status.Leader {
				return c.Node(m.Name)
			}
		}
	}
	return nil
}

// Close kills every node and closes the proxies.
func (c *Cluster) Close() {
	for _, n := range c.Nodes {
		c.Resume(n)
		c.Kill(n)
		n.PeerProxy.Close()
		n.GRPCProxy.Close()
	}
}
