package node

import (
	"context"
	"testing"
	"time"

	"orderlog/ingest"
)

// TestStandbyEvictsALeaderWhoseProcessIsGone: a sequencer leader whose
// gRPC server is gone while its etcd lease lives on (as when its node
// dies together with etcd's raft leader, which extends every lease) is
// replaced within seconds, not after its 30 s election TTL: the standby
// finds its connections refused and revokes its lease.
func TestStandbyEvictsALeaderWhoseProcessIsGone(t *testing.T) {
	etcd, cli := startEtcd(t)
	defer etcd.Close()
	defer cli.Close()
	start := func(roles Roles) *Server {
		return startTestNode(t, etcd, Config{Roles: roles, Ingest: ingest.Config{LeaseTTL: leaseTTL},
			Sequencer: SequencerTimeouts{ElectionTTL: 30 * time.Second}})
	}
	in := start(Roles{Ingest: true}) // the commit ledger's store
	defer in.Close()
	leader := start(Roles{Sequencer: true})
	defer leader.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	waitAllReady(t, ctx, leader)
	standby := start(Roles{Sequencer: true})
	defer standby.Close()
	waitAllReady(t, ctx, standby)
	first := leader.sequencer.Status().Epoch

	leader.grpc.Stop() // the process is gone for its peers; its lease is still renewed
	stopped := time.Now()
	waitFor(t, 10*time.Second, "the standby leading", func() bool {
		st := standby.sequencer.Status()
		return st.Serving && st.Epoch > first
	})
	t.Logf("the standby leads %v after the leader's gRPC server stopped", time.Since(stopped).Round(time.Millisecond))
}
