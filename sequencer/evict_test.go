package sequencer

import (
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
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
		{4650, 9, silent, false},
		{6000, 9, ok, false},
		// Seen for 5 s: silent for 1.5 s over three probes evicts it.
		{6650, 9, silent, false},
		{7150, 9, refused, false}, // mixed with refusals: the silent rule
		{7650, 9, silent, false},
		{8150, 9, silent, true},
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
