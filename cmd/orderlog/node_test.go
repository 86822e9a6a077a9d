package main

import (
	"strings"
	"testing"
)

// TestNodeReplicationFlags: --w and --a default from the node count (an
// external etcd cluster counts as three), A to a majority of W, and the
// failures tolerated follow; a node whose W exceeds its cluster is refused.
func TestNodeReplicationFlags(t *testing.T) {
	for _, tc := range []struct{ w, a, nodes, wantW, wantA, wantTolerate int }{
		{0, 0, 1, 1, 1, 0},
		{0, 0, 2, 2, 2, 0},
		{0, 0, 3, 3, 2, 1},
		{0, 0, 5, 3, 2, 1},
		{0, 0, 0, 3, 2, 1}, // external etcd: node count unknown
		{5, 0, 5, 5, 3, 2},
		{3, 3, 3, 3, 3, 1},
	} {
		w, a, tolerate, err := replicationFlags(tc.w, tc.a, tc.nodes)
		if err != nil || w != tc.wantW || a != tc.wantA || tolerate != tc.wantTolerate {
			t.Errorf("--w %d --a %d on %d nodes: %d/%d/%d %v; want %d/%d/%d", tc.w, tc.a, tc.nodes,
				w, a, tolerate, err, tc.wantW, tc.wantA, tc.wantTolerate)
		}
	}
	if _, _, _, err := replicationFlags(2, 3, 3); err == nil {
		t.Error("--a above --w was accepted")
	}
	fs := newFlagSet("node", nodeUsage)
	var f nodeFlags
	f.register(fs)
	if err := fs.Parse([]string{"--name", "n1", "--data", t.TempDir(), "--w", "3", "--etcd-initial-cluster", "n1=http://127.0.0.1:1"}); err != nil {
		t.Fatal(err)
	}
	cfg, err := f.config()
	if err == nil {
		err = cfg.Validate()
	}
	if err == nil || !strings.Contains(err.Error(), "W=3 stores per ledger, but the cluster has 1 node") {
		t.Errorf("W=3 on one node: %v", err)
	}
}
