package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"orderlog/client"
	"orderlog/internal/history"
	"orderlog/sequencer"
)

// nodeProcess is one `orderlog node` child process of a test cluster.
type nodeProcess struct {
	t                                        *testing.T
	name, dataDir                            string
	grpcAddr, httpAddr, etcdClient, etcdPeer string
	cluster                                  string
	cmd                                      *exec.Cmd
	log                                      *os.File
	// extraArgs are added to start's flags, env to its environment.
	extraArgs, env []string
}

// newTestCluster lays out n nodes on free loopback ports.
func newTestCluster(t *testing.T, n int) []*nodeProcess {
	t.Helper()
	nodes := make([]*nodeProcess, n)
	var members []string
	for i := range nodes {
		logFile, err := os.CreateTemp(t.TempDir(), "node-*.log")
		if err != nil {
			t.Fatal(err)
		}
		nodes[i] = &nodeProcess{t: t, name: fmt.Sprintf("n%d", i+1), dataDir: t.TempDir(), log: logFile,
			grpcAddr: freeAddr(t), httpAddr: freeAddr(t), etcdClient: freeAddr(t), etcdPeer: freeAddr(t)}
		members = append(members, nodes[i].name+"=http://"+nodes[i].etcdPeer)
	}
	for _, node := range nodes {
		node.cluster = strings.Join(members, ",")
	}
	return nodes
}

func (n *nodeProcess) start() {
	n.t.Helper()
	// The stores' registrations outlive the test's kill: with W = 3 on
	// three nodes, new ledgers then still find three registered stores
	// (acknowledged at A = 2) while one node is down.
	args := []string{"node", "--name", n.name, "--data", n.dataDir,
		"--grpc-addr", n.grpcAddr, "--http-addr", n.httpAddr,
		"--etcd-listen-client", n.etcdClient, "--etcd-listen-peer", n.etcdPeer, "--etcd-initial-cluster", n.cluster,
		"--store-lease-ttl", "60s", "--ingest-lease-ttl", "60s"}
	n.cmd = startChildEnv(n.t, n.log, n.env, append(args, n.extraArgs...)...)
}

func (n *nodeProcess) kill() {
	_ = n.cmd.Process.Signal(syscall.SIGKILL)
	_ = n.cmd.Wait()
}

func (n *nodeProcess) stop() {
	_ = n.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = n.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		n.kill()
	}
}

// waitReady waits until the node's /readyz answers 200.
func (n *nodeProcess) waitReady(ctx context.Context) {
	n.t.Helper()
	for !httpReady(ctx, n.httpAddr) {
		select {
		case <-ctx.Done():
			n.t.Fatalf("%s not ready: %v; log in %s", n.name, ctx.Err(), n.log.Name())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// leaderNode is the node whose sequencer leads, as etcd's election says.
func leaderNode(ctx context.Context, t *testing.T, nodes []*nodeProcess) *nodeProcess {
	t.Helper()
	var endpoints []string
	for _, n := range nodes {
		endpoints = append(endpoints, n.etcdClient)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	addr, err := sequencer.LeaderAddress(ctx, cli)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if n.grpcAddr == addr {
			return n
		}
	}
	t.Fatalf("leader address %q is no node's", addr)
	return nil
}

// TestThreeNodeClusterSurvivesTheLeaderNodesKill: three `orderlog node`
// processes with embedded etcd members; the node whose sequencer leads is
// SIGKILLed under load; producing through another node goes on; the
// killed node restarts and rejoins; every node's full read is the same and
// holds every acknowledged message once, in producer order.
func TestThreeNodeClusterSurvivesTheLeaderNodesKill(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three node processes")
	}
	nodes := newTestCluster(t, 3)
	for _, n := range nodes {
		n.start()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	for _, n := range nodes {
		n.waitReady(ctx)
	}
	leader := leaderNode(ctx, t, nodes)
	var through *nodeProcess // a node that stays up
	for _, n := range nodes {
		if n != leader {
			through = n
			break
		}
	}
	c, err := client.Dial(through.grpcAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	recorder := history.NewRecorder()
	errs := make(chan error, 1000)
	produceCtx, stopProducers := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Add(1)
		p := &crashProducer{name: fmt.Sprintf("p%d", i), recorder: recorder, errs: errs}
		go p.run(produceCtx, c, rand.New(rand.NewPCG(uint64(i), 7)), &wg)
	}
	waitAckedAfter(t, recorder, time.Now())
	killed := time.Now()
	leader.kill()
	resumed := waitSentAndAckedAfter(t, recorder, killed, killed)
	t.Logf("sequencer leader %s killed; producing through %s resumed after %s", leader.name, through.name,
		resumed.Sub(killed).Round(time.Millisecond))

	leader.start() // rejoins with its data directory
	leader.waitReady(ctx)
	waitAckedAfter(t, recorder, time.Now())
	stopProducers()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	ops := recorder.Ops()
	var end uint64
	for _, op := range ops {
		if !op.Acked.IsZero() {
			end = max(end, op.Offset+1)
		}
	}
	var reads []history.Read
	for _, n := range nodes {
		nc, err := client.Dial(n.grpcAddr)
		if err != nil {
			t.Fatal(err)
		}
		waitCommittedAt(t, nc, end)
		nc.Close()
		reads = append(reads, fullRead(t, n.grpcAddr))
	}
	for i, r := range reads[1:] {
		if fmt.Sprint(r.Messages) != fmt.Sprint(reads[0].Messages) || fmt.Sprint(r.Holes) != fmt.Sprint(reads[0].Holes) {
			t.Errorf("%s's full read differs from %s's", nodes[i+1].name, nodes[0].name)
		}
	}
	report, violations := history.Check(ops, reads[0])
	for _, v := range violations {
		t.Error(v)
	}
	t.Logf("%v", report)
	if report.Acked == 0 {
		t.Fatal("no message was acknowledged")
	}
	for _, n := range nodes {
		n.stop()
	}
	if t.Failed() || os.Getenv("ORDERLOG_TEST_LOGS") != "" {
		for _, n := range nodes {
			raw, _ := os.ReadFile(n.log.Name())
			t.Logf("%s log:\n%s", n.name, raw)
		}
	}
}
