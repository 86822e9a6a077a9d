// Command cluster benchmarks a three-node orderlog (`make bench-cluster`):
// three `orderlog node` processes on this machine with embedded etcd
// members, ledgers replicated W=3 A=2, 1 KiB messages, fsync before ack,
// 16 idempotent gRPC streams spread over the nodes. The reference is
// `orderlog dev` (one node, W=A=1) driven by the same 16 streams on the
// same disk, measured in the same run. Rounds alternate the two, so a slow
// minute of the machine hits one pair, not the figure; medians are
// reported. It ends with cluster_msgs_per_s=<n> and
// cluster_vs_single_ratio=<x>. The three stores share one disk here: a
// third of the single node's rate is the physical ceiling of W=3.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"orderlog/bench/internal/benchutil"
	"orderlog/client"
)

func main() {
	binary := flag.String("orderlog", "bin/orderlog", "the orderlog binary")
	duration := flag.Duration("duration", 8*time.Second, "length of each measurement")
	streams := flag.Int("streams", 16, "producer streams, spread over the nodes")
	size := flag.Int("size", 1024, "message size")
	rounds := flag.Int("rounds", 3, "alternating single/cluster rounds; medians are reported")
	flag.Parse()

	dir, err := os.MkdirTemp("", "orderlog-cluster-bench")
	check(err)
	defer os.RemoveAll(dir)
	load := client.LoadConfig{Streams: *streams, Size: *size, Frame: 64, InFlight: 8, Duration: *duration}

	var single, cluster []float64
	for r := range *rounds {
		rate := measure(fmt.Sprintf("round %d single", r), startDev(*binary, filepath.Join(dir, fmt.Sprintf("dev%d", r))), load)
		single = append(single, rate)
		rate = measure(fmt.Sprintf("round %d cluster", r), startCluster(*binary, filepath.Join(dir, fmt.Sprintf("cluster%d", r)), 3), load)
		cluster = append(cluster, rate)
	}
	fmt.Printf("single_msgs_per_s=%.0f (orderlog dev, W=A=1, median of %d rounds)\n", benchutil.Median(single), *rounds)
	fmt.Printf("cluster_msgs_per_s=%.0f (3 nodes, W=3 A=2, median of %d rounds)\n", benchutil.Median(cluster), *rounds)
	fmt.Printf("cluster_vs_single_ratio=%.2f\n", benchutil.Median(cluster)/benchutil.Median(single))
}

// processes are the orderlog processes of one measurement and the gRPC
// address of each node.
type processes struct {
	cmds  []*exec.Cmd
	addrs []string
}

func (p processes) stop() {
	for _, c := range p.cmds {
		_ = c.Process.Signal(syscall.SIGTERM)
	}
	for _, c := range p.cmds {
		_ = c.Wait()
	}
}

// measure warms the system up, then runs the load with its streams spread
// over the nodes (one client per node), and returns the summed rate.
func measure(label string, p processes, load client.LoadConfig) float64 {
	defer p.stop()
	clients := make([]*client.Client, len(p.addrs))
	for i, addr := range p.addrs {
		c, err := client.Dial(addr)
		check(err)
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		check(c.WaitReady(ctx))
		cancel()
		clients[i] = c
	}
	run := func(cfg client.LoadConfig) (total float64, results []client.LoadResult) {
		results = make([]client.LoadResult, len(clients))
		var wg sync.WaitGroup
		errs := make([]error, len(clients))
		for i, c := range clients {
			share := cfg
			share.Streams = cfg.Streams / len(clients)
			if i < cfg.Streams%len(clients) {
				share.Streams++
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				results[i], errs[i] = client.RunLoad(context.Background(), c, share)
			}()
		}
		wg.Wait()
		for i := range clients {
			check(errs[i])
			total += results[i].MessagesPerSecond()
		}
		return total, results
	}
	warm := load
	warm.Duration = time.Second
	run(warm) // ledgers open, reservations made, producers registered
	total, results := run(load)
	var p99 []float64
	for _, r := range results {
		p99 = append(p99, float64(r.Percentile(0.99).Microseconds())/1000)
	}
	fmt.Printf("%s: %.0f msg/s, %.1f MB/s over %d node(s); ack p99 per node %v ms\n", label, total,
		total*float64(load.Size)/1e6, len(clients), p99)
	return total
}

// startDev starts `orderlog dev` and returns it once it printed its
// address.
func startDev(binary, dir string) processes {
	cmd := exec.Command(binary, "dev", "--data", dir, "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0",
		"--etcd-addr", "127.0.0.1:0", "--archive", "none")
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	check(err)
	check(cmd.Start())
	return processes{cmds: []*exec.Cmd{cmd}, addrs: []string{grpcAddr(stdout)}}
}

// startCluster starts n `orderlog node` processes whose embedded etcd
// members form one cluster, on free loopback ports.
func startCluster(binary, dir string, n int) processes {
	type ports struct{ grpc, http, client, peer string }
	nodes := make([]ports, n)
	var initial []string
	for i := range nodes {
		nodes[i] = ports{freeAddr(), freeAddr(), freeAddr(), freeAddr()}
		initial = append(initial, fmt.Sprintf("n%d=http://%s", i+1, nodes[i].peer))
	}
	var p processes
	for i, ports := range nodes {
		cmd := exec.Command(binary, "node", "--name", fmt.Sprintf("n%d", i+1), "--data", filepath.Join(dir, fmt.Sprintf("n%d", i+1)),
			"--grpc-addr", ports.grpc, "--http-addr", ports.http, "--etcd-listen-client", ports.client,
			"--etcd-listen-peer", ports.peer, "--etcd-initial-cluster", strings.Join(initial, ","), "--w", "3", "--a", "2")
		cmd.Stderr = os.Stderr
		check(cmd.Start())
		p.cmds = append(p.cmds, cmd)
		p.addrs = append(p.addrs, ports.grpc)
	}
	return p
}

func freeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	check(err)
	defer l.Close()
	return l.Addr().String()
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench/cluster:", err)
		os.Exit(1)
	}
}

// grpcAddr is orderlog dev's gRPC address from its banner.
func grpcAddr(stdout io.Reader) string {
	addr, err := benchutil.ReadGRPCAddr(stdout)
	check(err)
	return addr
}
