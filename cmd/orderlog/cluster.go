package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

const clusterUsage = `cluster --nodes N --data DIR [flags]

Starts N ` + "`orderlog node`" + ` processes on 127.0.0.1, each with an embedded etcd
member of one cluster: a local highly available orderlog. Node i (1..N) is
named n<i>, keeps its state in DIR/n<i> (its log in DIR/n<i>/node.log, its
pid in DIR/n<i>/pid, the command that starts it again in DIR/n<i>/cmd) and
listens on
  gRPC         --grpc-port + (i-1)        (7070, 7071, 7072)
  HTTP         --http-port + (i-1)        (7080, 7081, 7082)
  etcd client  --etcd-port + 10·(i-1)     (2379, 2389, 2399)
  etcd peer    --etcd-port + 10·(i-1) + 1 (2380, 2390, 2400)
Stop with Ctrl-C (or SIGTERM): every node gets SIGTERM, then SIGKILL after
--stop-timeout.`

// clusterNode is one node process of the launcher.
type clusterNode struct {
	name, dir                                string
	grpcAddr, httpAddr, etcdClient, etcdPeer string
	args                                     []string
	cmd                                      *exec.Cmd
	exited                                   chan struct{}
}

// clusterFlags are the flags of `orderlog cluster`.
type clusterFlags struct {
	nodes                        int
	dataDir                      string
	grpcPort, httpPort, etcdPort int
	stopTimeout, readyTimeout    time.Duration
	nodeArgs                     string
}

func (c *clusterFlags) register(fs *flag.FlagSet) {
	fs.IntVar(&c.nodes, "nodes", 3, "number of node processes (3 tolerates one failure)")
	fs.StringVar(&c.dataDir, "data", "./data-cluster", "directory holding one subdirectory per node")
	fs.IntVar(&c.grpcPort, "grpc-port", 7070, "gRPC port of node 1 (node i: +i-1)")
	fs.IntVar(&c.httpPort, "http-port", 7080, "HTTP port of node 1 (node i: +i-1)")
	fs.IntVar(&c.etcdPort, "etcd-port", 2379, "etcd client port of node 1 (node i: +10·(i-1); peer port: +1)")
	fs.DurationVar(&c.stopTimeout, "stop-timeout", 15*time.Second, "after SIGTERM, how long a node has to stop before SIGKILL")
	fs.DurationVar(&c.readyTimeout, "ready-timeout", 2*time.Minute, "give up if the nodes are not all ready after this long")
	fs.StringVar(&c.nodeArgs, "node-args", "", `more flags for every node, space-separated (e.g. "--grant-lease 5s --log-level debug")`)
}

// plan lays out the nodes' names, directories, addresses and arguments.
func (c *clusterFlags) plan() ([]*clusterNode, error) {
	if c.nodes < 1 {
		return nil, fmt.Errorf("--nodes %d: want at least 1", c.nodes)
	}
	if c.nodes > 10 {
		return nil, fmt.Errorf("--nodes %d: at most 10 (gRPC and HTTP ports are consecutive)", c.nodes)
	}
	dataDir, err := filepath.Abs(c.dataDir)
	if err != nil {
		return nil, err
	}
	nodes := make([]*clusterNode, c.nodes)
	var members []string
	for i := range nodes {
		n := &clusterNode{name: fmt.Sprintf("n%d", i+1), exited: make(chan struct{})}
		n.dir = filepath.Join(dataDir, n.name)
		n.grpcAddr = fmt.Sprintf("127.0.0.1:%d", c.grpcPort+i)
		n.httpAddr = fmt.Sprintf("127.0.0.1:%d", c.httpPort+i)
		n.etcdClient = fmt.Sprintf("127.0.0.1:%d", c.etcdPort+10*i)
		n.etcdPeer = fmt.Sprintf("127.0.0.1:%d", c.etcdPort+10*i+1)
		members = append(members, n.name+"=http://"+n.etcdPeer)
		nodes[i] = n
	}
	for _, n := range nodes {
		n.args = []string{"node", "--name", n.name, "--data", n.dir, "--grpc-addr", n.grpcAddr, "--http-addr", n.httpAddr,
			"--etcd-listen-client", n.etcdClient, "--etcd-listen-peer", n.etcdPeer,
			"--etcd-initial-cluster", strings.Join(members, ",")}
		n.args = append(n.args, strings.Fields(c.nodeArgs)...)
	}
	return nodes, checkPorts(nodes)
}

// checkPorts fails, naming the port and its use, when any planned port
// clashes with another or is taken (by `make run`, say). Clashes are
// looked for first: they are a mistake in the flags whatever else runs.
func checkPorts(nodes []*clusterNode) error {
	type port struct{ addr, what string }
	var ports []port
	for _, n := range nodes {
		ports = append(ports, port{n.grpcAddr, n.name + " gRPC"}, port{n.httpAddr, n.name + " HTTP"},
			port{n.etcdClient, n.name + " etcd client"}, port{n.etcdPeer, n.name + " etcd peer"})
	}
	seen := map[string]string{}
	for _, p := range ports {
		if other, dup := seen[p.addr]; dup {
			return fmt.Errorf("%s would be both %s and %s: choose other base ports", p.addr, other, p.what)
		}
		seen[p.addr] = p.what
	}
	for _, p := range ports {
		l, err := net.Listen("tcp", p.addr)
		if err != nil {
			return fmt.Errorf("%s (%s) is in use — is another orderlog running? (%w)", p.addr, p.what, err)
		}
		l.Close()
	}
	return nil
}

func runCluster(args []string) error {
	fs := newFlagSet("cluster", clusterUsage)
	var cf clusterFlags
	cf.register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	nodes, err := cf.plan()
	if err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	signals, stopped := stopSignals()
	defer stopped()
	fmt.Printf("orderlog cluster: starting %d nodes (data in %s)\n", len(nodes), filepath.Dir(nodes[0].dir))
	defer stopNodes(nodes, cf.stopTimeout)
	for _, n := range nodes {
		if err := n.start(exe); err != nil {
			return err
		}
		fmt.Printf("  %s  pid %-7d gRPC %s  HTTP http://%s  etcd %s  log %s\n", n.name, n.cmd.Process.Pid,
			n.grpcAddr, n.httpAddr, n.etcdClient, filepath.Join(n.dir, "node.log"))
	}
	if err := waitClusterReady(signals, nodes, cf.readyTimeout); err != nil {
		if signals.Err() != nil {
			fmt.Println("orderlog cluster: stopping")
			return nil
		}
		return err
	}
	printClusterTour(nodes)
	var stopping atomic.Bool
	for _, n := range nodes {
		go n.reportExit(&stopping)
	}
	<-signals.Done()
	stopping.Store(true)
	stopped()
	fmt.Printf("orderlog cluster: stopping the nodes (SIGTERM; SIGKILL after %s)\n", cf.stopTimeout)
	return nil
}

// start starts the node process (in its own process group, so a Ctrl-C
// reaches the launcher only and the nodes stop in order) and records its
// pid and the command that starts it again.
func (n *clusterNode) start(exe string) error {
	if err := os.MkdirAll(n.dir, 0o755); err != nil {
		return err
	}
	logFile, err := os.OpenFile(filepath.Join(n.dir, "node.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close() // the child holds its own descriptor
	n.cmd = exec.Command(exe, n.args...)
	n.cmd.Stdout, n.cmd.Stderr = logFile, logFile
	n.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := n.cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", n.name, err)
	}
	go func() { _ = n.cmd.Wait(); close(n.exited) }()
	if err := os.WriteFile(filepath.Join(n.dir, "pid"), []byte(strconv.Itoa(n.cmd.Process.Pid)+"\n"), 0o644); err != nil {
		return err
	}
	restart := shellQuote(exe) + " " + strings.Join(quoteAll(n.args), " ") + " >>" + shellQuote(filepath.Join(n.dir, "node.log")) + " 2>&1\n"
	return os.WriteFile(filepath.Join(n.dir, "cmd"), []byte(restart), 0o755)
}

// waitClusterReady waits until every node's /readyz answers 200, printing
// each node as it gets ready; a node that exits meanwhile fails the start.
func waitClusterReady(ctx context.Context, nodes []*clusterNode, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ready := map[string]bool{}
	fmt.Print("waiting for the nodes to be ready (etcd quorum, sequencer leader, stores):")
	defer fmt.Println()
	for len(ready) < len(nodes) {
		for _, n := range nodes {
			select {
			case <-n.exited:
				return fmt.Errorf("%s exited while starting (%v); see %s", n.name, n.cmd.ProcessState, filepath.Join(n.dir, "node.log"))
			default:
			}
			if !ready[n.name] && httpReady(ctx, n.httpAddr) {
				ready[n.name] = true
				fmt.Printf(" %s", n.name)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("nodes not ready after %s: %w", timeout, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	fmt.Print(" — all ready")
	return nil
}

func httpReady(ctx context.Context, addr string) bool {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
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

func printClusterTour(nodes []*clusterNode) {
	addrs := make([]string, len(nodes))
	for i, n := range nodes {
		addrs[i] = n.grpcAddr
	}
	fmt.Println("\nTry, in another terminal:")
	list := strings.Join(addrs, ",")
	fmt.Printf("  seq 1 5 | ./bin/orderlog produce --addr %s --topic demo\n", list)
	fmt.Printf("  ./bin/orderlog read --addr %s --offset 0\n", list)
	fmt.Printf("  curl -s http://%s/v1/status\n", nodes[0].httpAddr)
	fmt.Printf("  kill -9 $(cat %s)   # and start it again: sh %s\n", filepath.Join(nodes[0].dir, "pid"), filepath.Join(nodes[0].dir, "cmd"))
	fmt.Println("Stop with Ctrl-C.")
}

// reportExit says when a node the launcher started exits by itself.
func (n *clusterNode) reportExit(stopping *atomic.Bool) {
	<-n.exited
	if stopping.Load() {
		return
	}
	fmt.Printf("orderlog cluster: %s (pid %d) exited: %v; start it again with: sh %s\n",
		n.name, n.cmd.Process.Pid, n.cmd.ProcessState, filepath.Join(n.dir, "cmd"))
}

// stopNodes sends SIGTERM to every node still running — those the
// launcher started, and those started again by hand from DIR/<name>/cmd
// (found by their pid file) — and SIGKILL to any not gone after timeout.
func stopNodes(nodes []*clusterNode, timeout time.Duration) {
	var running []*os.Process
	for _, n := range nodes {
		if n.cmd == nil {
			continue
		}
		select {
		case <-n.exited:
			if p := restartedNode(n); p != nil {
				running = append(running, p)
			}
		default:
			running = append(running, n.cmd.Process)
		}
	}
	for _, p := range running {
		_ = p.Signal(syscall.SIGTERM)
	}
	deadline := time.Now().Add(timeout)
	for _, p := range running {
		for alive(p) && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		if alive(p) {
			fmt.Printf("orderlog cluster: pid %d did not stop in %s: SIGKILL\n", p.Pid, timeout)
			_ = p.Signal(syscall.SIGKILL)
		}
	}
	for _, n := range nodes {
		if n.cmd != nil {
			<-n.exited
		}
	}
	fmt.Println("orderlog cluster: all nodes stopped")
}

// restartedNode is the process of n started again by hand, if its pid
// file names a live `orderlog node` on n's data directory.
func restartedNode(n *clusterNode) *os.Process {
	raw, err := os.ReadFile(filepath.Join(n.dir, "pid"))
	if err != nil {
		return nil
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil || pid == n.cmd.Process.Pid {
		return nil
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || !strings.Contains(string(cmdline), "\x00node\x00") || !strings.Contains(string(cmdline), n.dir) {
		return nil
	}
	p, err := os.FindProcess(pid)
	if err != nil {
		return nil
	}
	return p
}

// alive says whether p still runs. For a child of the launcher this is
// also true until it is reaped, which its own Wait goroutine does.
func alive(p *os.Process) bool {
	err := p.Signal(syscall.Signal(0))
	return err == nil || !errors.Is(err, os.ErrProcessDone) && !errors.Is(err, syscall.ESRCH)
}

func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r == '/' || r == '.' || r == '-' || r == '_' || r == ':' || r == ',' || r == '=' ||
			r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9')
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func quoteAll(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = shellQuote(a)
	}
	return out
}
