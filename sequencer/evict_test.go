package sequencer

import (
	"context"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

func TestGoneTrackerEvictsARefusingLeaderAfterThreeProbesOverTheWindow(t *testing.T) {
	const ok, refused, silent = probeAnswered, probeRefused, probeUnanswered
	steps := []struct {
		ms      int
		lease   int64
		outcome probeOutcome
		evict   bool
	}{
		{0, 7, refused, false},
		{150, 7, refused, false},
		{300, 7, ok, false}, // it answered: the run starts again
		{450, 7, refused, false},
		{600, 7, refused, false},
		{750, 7, refused, false},  // three probes, but over 300 ms only
		{900, 7, refused, true},   // 450 ms
		{1050, 8, refused, false}, // another leader: a run of its own
		{1200, 8, refused, false},
		{1350, 8, refused, false},
		{1500, 8, refused, true},
		// A silent leader seen leading for less than leaderSettleFor is
		// not evicted, however long it is silent.
		{1650, 9, silent, false},
		{2400, 9, silent, false},
		{3150, 9, silent, false},
		{4600, 9, silent, false}, // silent for 2.95 s, seen for as long
		{4640, 9, ok, false},
		// Seen for 3 s: silent for 1 s over three probes after a first
		// unanswered one evicts it.
		{5000, 9, silent, false},
		{5500, 9, refused, false}, // mixed with refusals: the silent rule
		{5900, 9, silent, false},
		{6000, 9, silent, true},
	}
	var g goneTracker
	t0 := time.Unix(0, 0)
	for i, s := range steps {
		at := t0.Add(time.Duration(s.ms) * time.Millisecond)
		if got := g.observe(at, clientv3.LeaseID(s.lease), s.outcome); got != s.evict {
			t.Fatalf("step %d (%d ms, lease %d, outcome %d): evict %v, want %v", i, s.ms, s.lease, s.outcome, got, s.evict)
		}
	}
}

func TestStandbyKeepsProbingTheLastNamedLeaderWhileEtcdCannotAnswer(t *testing.T) {
	kv := func(addr string, lease int64) *clientv3.GetResponse {
		return &clientv3.GetResponse{Kvs: []*mvccpb.KeyValue{{Value: []byte(addr), Lease: lease}}}
	}
	a := nameLeader(nil, kv("a:1", 7), nil)
	if a == nil || a.addr != "a:1" || a.lease != 7 {
		t.Fatalf("named %+v, want a:1 with lease 7", a)
	}
	// etcd's raft elects (the leader's node led it too): keep probing a.
	if got := nameLeader(a, nil, context.DeadlineExceeded); got != a {
		t.Fatalf("while etcd cannot answer: named %+v, want the last named %+v", got, a)
	}
	if got := nameLeader(a, nil, concurrency.ErrElectionNoLeader); got != nil {
		t.Fatalf("with no leader: named %+v, want none", got)
	}
	if got := nameLeader(a, kv("b:1", 8), nil); got == nil || got.addr != "b:1" {
		t.Fatalf("named %+v, want b:1", got)
	}
	if got := nameLeader(nil, nil, context.DeadlineExceeded); got != nil {
		t.Fatalf("never named: %+v, want none", got)
	}
}
