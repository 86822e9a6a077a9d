package main

import (
	"net"
	"strconv"
	"strings"
	"testing"
)

// TestClusterPlanRefusesClashingAndTakenPorts: the launcher names the port
// and its use when two nodes' ports coincide or one is taken already.
func TestClusterPlanRefusesClashingAndTakenPorts(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	port := taken.Addr().(*net.TCPAddr).Port
	free := func() int {
		addr := freeAddr(t)
		_, p, _ := net.SplitHostPort(addr)
		n, _ := strconv.Atoi(p)
		return n
	}
	base := free()
	for name, tc := range map[string]struct {
		flags clusterFlags
		want  string
	}{
		"grpc_meets_http": {clusterFlags{nodes: 3, dataDir: t.TempDir(), grpcPort: base, httpPort: base + 1, etcdPort: free()}, "would be both"},
		"taken":           {clusterFlags{nodes: 1, dataDir: t.TempDir(), grpcPort: port, httpPort: free(), etcdPort: free()}, "is in use"},
		"too_few":         {clusterFlags{nodes: 0, dataDir: t.TempDir()}, "at least 1"},
	} {
		_, err := tc.flags.plan()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: plan = %v, want an error containing %q", name, err, tc.want)
		}
	}
}

// TestClusterPlanLaysOutMembers: node i gets its own ports and every node
// the same initial cluster.
func TestClusterPlanLaysOutMembers(t *testing.T) {
	f := clusterFlags{nodes: 3, dataDir: t.TempDir(), grpcPort: 17070, httpPort: 17080, etcdPort: 12379}
	nodes, err := f.plan()
	if err != nil {
		t.Skipf("default test ports in use: %v", err)
	}
	want := "n1=http://127.0.0.1:12380,n2=http://127.0.0.1:12390,n3=http://127.0.0.1:12400"
	for i, n := range nodes {
		args := strings.Join(n.args, " ")
		if !strings.Contains(args, "--etcd-initial-cluster "+want) || n.grpcAddr != "127.0.0.1:"+strconv.Itoa(17070+i) {
			t.Errorf("node %d: %s", i+1, args)
		}
	}
}
