package node

import (
	"strings"
	"testing"
	"time"

	"orderlog/ingest"
)

const threeMembers = "n1=http://127.0.0.1:1,n2=http://127.0.0.1:2,n3=http://127.0.0.1:3"

// TestReplicationDefaultsToTheClusterSize: an embedded member's ledgers
// default to a majority of min(nodes, 3) stores, the commit ledger to the
// same, and a W larger than the cluster is refused.
func TestReplicationDefaultsToTheClusterSize(t *testing.T) {
	for name, tc := range map[string]struct {
		cluster          string
		ingest           ingest.Config
		commit           Replication
		want, commitWant Replication
		refused          string
	}{
		"one_node":       {cluster: "n1=http://127.0.0.1:1", want: Replication{W: 1, A: 1}, commitWant: Replication{W: 1, A: 1}},
		"two_nodes":      {cluster: "n1=http://127.0.0.1:1,n2=http://127.0.0.1:2", want: Replication{W: 2, A: 2}, commitWant: Replication{W: 2, A: 2}},
		"three_nodes":    {cluster: threeMembers, want: Replication{W: 3, A: 2, Tolerate: 1}, commitWant: Replication{W: 3, A: 2, Tolerate: 1}},
		"five_nodes":     {cluster: threeMembers + ",n4=http://127.0.0.1:4,n5=http://127.0.0.1:5", want: Replication{W: 3, A: 2, Tolerate: 1}, commitWant: Replication{W: 3, A: 2, Tolerate: 1}},
		"explicit":       {cluster: threeMembers, ingest: ingest.Config{W: 1, A: 1}, want: Replication{W: 1, A: 1}, commitWant: Replication{W: 1, A: 1}},
		"commitWantown":  {cluster: threeMembers, commit: Replication{W: 1, A: 1}, want: Replication{W: 3, A: 2, Tolerate: 1}, commitWant: Replication{W: 1, A: 1}},
		"w_over_nodes":   {cluster: "n1=http://127.0.0.1:1", ingest: ingest.Config{W: 3, A: 2, Tolerate: 1}, refused: "W=3 stores per ledger, but the cluster has 1 node"},
		"commitWantover": {cluster: threeMembers + ",n4=http://127.0.0.1:4", commit: Replication{W: 5, A: 3, Tolerate: 2}, refused: "commit ledger W=5, but the cluster has 4 node"},
		"not_a_member":   {cluster: "n2=http://127.0.0.1:2", refused: `member "n1" is not in the initial cluster`},
		"bad_election":   {cluster: threeMembers, refused: "whole number of seconds"},
	} {
		cfg := Config{DataDir: t.TempDir(), NodeName: "n1", Member: EtcdMember{InitialCluster: tc.cluster}, Ingest: tc.ingest, Commit: tc.commit}
		if name == "bad_election" {
			cfg.Sequencer.ElectionTTL = 1500 * time.Millisecond
		}
		err := cfg.Validate()
		if tc.refused != "" {
			if err == nil || !strings.Contains(err.Error(), tc.refused) {
				t.Errorf("%s: Validate = %v, want an error containing %q", name, err, tc.refused)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		got := Replication{W: cfg.Ingest.W, A: cfg.Ingest.A, Tolerate: cfg.Ingest.Tolerate}
		if got != tc.want || cfg.Commit != tc.commitWant {
			t.Errorf("%s: ledgers %+v, commit %+v; want %+v and %+v", name, got, cfg.Commit, tc.want, tc.commitWant)
		}
	}
}

// TestSingleServerReplicationIsUnchanged: without an initial cluster (dev,
// or an external etcd cluster) nothing is defaulted from a node count.
func TestSingleServerReplicationIsUnchanged(t *testing.T) {
	cfg := Config{DataDir: t.TempDir()}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if cfg.Ingest.W != 1 || cfg.Commit.W != 1 || cfg.StoreLeaseTTL != ingest.DefaultLeaseTTL {
		t.Fatalf("W %d, commit W %d, store lease %s: want 1, 1 and %s", cfg.Ingest.W, cfg.Commit.W, cfg.StoreLeaseTTL, ingest.DefaultLeaseTTL)
	}
	ext := Config{Roles: Roles{Ingest: true}, DataDir: t.TempDir(), EtcdEndpoints: []string{"127.0.0.1:1"},
		Member: EtcdMember{InitialCluster: threeMembers}, NodeName: "n1"}
	if err := ext.Validate(); err == nil {
		t.Fatal("an external etcd cluster and an embedded member were both accepted")
	}
}
