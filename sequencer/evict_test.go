package sequencer

import (
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestGoneTrackerEvictsAfterThreeProbesOverTheWindow(t *testing.T) {
	t0 := time.Unix(0, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	var g goneTracker
	steps := []struct {
		ms    int
		lease int64
		gone  bool
		evict bool
	}{
		{0, 7, true, false},
		{150, 7, true, false},
		{300, 7, false, false}, // it answered: the run starts again
		{450, 7, true, false},
		{600, 7, true, false},
		{750, 7, true, false},  // three probes, but over 300 ms only
		{900, 7, true, true},   // 450 ms
		{1050, 8, true, false}, // another leader: a run of its own
		{1200, 8, true, false},
		{1350, 8, true, false},
		{1500, 8, true, true},
	}
	for i, s := range steps {
		if got := g.observe(at(s.ms), clientv3.LeaseID(s.lease), s.gone); got != s.evict {
			t.Fatalf("step %d (%d ms, lease %d, gone %v): evict %v, want %v", i, s.ms, s.lease, s.gone, got, s.evict)
		}
	}
}
