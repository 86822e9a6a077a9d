package sequencer

import (
	"context"
	"fmt"
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
		if got := g.observe(at, fmt.Sprint(s.lease), clientv3.LeaseID(s.lease), s.outcome); got != s.evict {
			t.Fatalf("step %d (%d ms, lease %d, outcome %d): evict %v, want %v", i, s.ms, s.lease, s.outcome, got, s.evict)
		}
	}
}

func TestStandbyKeepsProbingTheLastNamedLeaderWhileEtcdCannotAnswer(t *testing.T) {
	kv := func(addr string, lease int64) *clientv3.GetResponse {
		return &clientv3.GetResponse{Kvs: []*mvccpb.KeyValue{{Value: []byte(addr), Lease: lease}}}
	}
	t0 := time.Unix(100, 0)
	a := nameLeader(nil, kv("a:1", 7), nil, t0)
	if a == nil || a.addr != "a:1" || a.lease != 7 || !a.named.Equal(t0) {
		t.Fatalf("named %+v, want a:1 with lease 7 named at t0", a)
	}
	// etcd's raft elects (the leader's node led it too): keep probing a.
	if got := nameLeader(a, nil, context.DeadlineExceeded, t0.Add(time.Second)); got != a {
		t.Fatalf("while etcd cannot answer: named %+v, want the last named %+v", got, a)
	}
	if got := nameLeader(a, nil, concurrency.ErrElectionNoLeader, t0); got != nil {
		t.Fatalf("with no leader: named %+v, want none", got)
	}
	if got := nameLeader(a, kv("b:1", 8), nil, t0); got == nil || got.addr != "b:1" {
		t.Fatalf("named %+v, want b:1", got)
	}
	if got := nameLeader(nil, nil, context.DeadlineExceeded, t0); got != nil {
		t.Fatalf("never named: %+v, want none", got)
	}
}

// TestStandbyRevokesOnlyOnAProbeThatFailedJustAfterEtcdNamedTheLeader:
// probes made while etcd could not answer this standby may have failed
// because the standby was the one cut off; the revocation waits for a
// probe that began shortly after etcd named the same leader, and fails.
func TestStandbyRevokesOnlyOnAProbeThatFailedJustAfterEtcdNamedTheLeader(t *testing.T) {
	t0 := time.Unix(100, 0)
	kv := &clientv3.GetResponse{Kvs: []*mvccpb.KeyValue{{Value: []byte("a:1"), Lease: 7}}}
	named := nameLeader(nil, kv, nil, t0)
	if !probeDecides(named, named, t0.Add(10*time.Millisecond)) {
		t.Fatal("a probe begun 10 ms after etcd named the leader does not decide")
	}
	// An unanswered probe waits out its timeout while etcd, answering
	// every leaderProbeEvery, names the same leader again: it decides
	// (it did not, and a paused leader was waited out for its TTL).
	renamed := nameLeader(named, kv, nil, t0.Add(leaderProbeTimeout))
	if !probeDecides(named, renamed, t0.Add(10*time.Millisecond)) {
		t.Fatal("a probe that outlasted etcd's next naming of the same leader does not decide")
	}
	if probeDecides(named, named, t0.Add(-time.Millisecond)) {
		t.Fatal("a probe begun before etcd named the leader decides")
	}
	stale := nameLeader(named, nil, context.DeadlineExceeded, t0.Add(3*time.Second)) // etcd silent since t0
	if probeDecides(stale, stale, t0.Add(2*time.Second)) {
		t.Fatal("a probe begun 2 s after etcd last answered decides")
	}
	other := &clientv3.GetResponse{Kvs: []*mvccpb.KeyValue{{Value: []byte("b:1"), Lease: 8}}}
	if probeDecides(named, nameLeader(stale, other, nil, t0.Add(3*time.Second)), t0.Add(10*time.Millisecond)) {
		t.Fatal("decides although etcd now names another leader")
	}
}

// TestGoneTrackerStartsANewRunForAnotherKeyAtTheSameAddress: a stale key
// of the evicted process keeps how long its address was seen leading, but
// needs a run of its own (a process restarted there gets its probes).
func TestGoneTrackerStartsANewRunForAnotherKeyAtTheSameAddress(t *testing.T) {
	var g goneTracker
	t0 := time.Unix(0, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	for _, ms := range []int{0, 150, 300} {
		g.observe(at(ms), "a:1", 7, probeRefused)
	}
	if !g.observe(at(450), "a:1", 7, probeRefused) {
		t.Fatal("lease 7 refused over 450 ms: not evicted")
	}
	if g.observe(at(600), "a:1", 8, probeRefused) {
		t.Fatal("another key at the same address evicted on its first probe")
	}
	for _, ms := range []int{750, 900} {
		g.observe(at(ms), "a:1", 8, probeRefused)
	}
	if !g.observe(at(1050), "a:1", 8, probeRefused) {
		t.Fatal("lease 8 refused over 450 ms: not evicted")
	}
	if !g.seen.Equal(t0) {
		t.Fatalf("seen %v, want the address's first sighting %v", g.seen, t0)
	}
}

// TestLeaderHeardIsASecondOpinionOnlyWhileFresh: a leader this process's
// grant stream heard within the window is not deposed for unanswered
// probes; one silent for the window, or never heard, is.
func TestLeaderHeardIsASecondOpinionOnlyWhileFresh(t *testing.T) {
	t0 := time.Unix(100, 0)
	var none *LeaderHeard
	if none.heardWithin("a:1", leaderSilentFor, t0) {
		t.Fatal("a nil LeaderHeard heard a leader")
	}
	var h LeaderHeard
	if h.heardWithin("a:1", leaderSilentFor, t0) {
		t.Fatal("heard a leader never noted")
	}
	h.Note("a:1", t0)
	h.Note("a:1", t0.Add(-time.Second)) // a late note of an older frame
	if !h.heardWithin("a:1", leaderSilentFor, t0.Add(leaderSilentFor-time.Millisecond)) {
		t.Fatal("a leader heard just now does not count")
	}
	if h.heardWithin("a:1", leaderSilentFor, t0.Add(leaderSilentFor)) {
		t.Fatal("a leader silent for the window still counts")
	}
	if h.heardWithin("b:1", leaderSilentFor, t0) {
		t.Fatal("another address counts")
	}
}

// TestAKeyAtThisAddressOlderThanTheProcessIsAnEarlierProcesss: a key at
// this node's address created before this process's first election lease
// belongs to a process that died here (etcd extends a dead process's
// lease at each of its raft leader changes, so it may still lead after
// the one before it is evicted); run c101 cycle 9 waited 3 s of rate
// limit to evict such a key.
func TestAKeyAtThisAddressOlderThanTheProcessIsAnEarlierProcesss(t *testing.T) {
	n := &Node{cfg: Config{Address: "a:1"}}
	if n.earlierProcessKey("a:1", 5) {
		t.Fatal("before its first lease a process calls keys earlier")
	}
	n.noteFirstGrant(100)
	n.noteFirstGrant(200) // later grants do not move it
	if !n.earlierProcessKey("a:1", 99) {
		t.Fatal("a key created before the first lease is not an earlier process's")
	}
	if n.earlierProcessKey("a:1", 150) {
		t.Fatal("a key created after the first lease is called an earlier process's")
	}
	if n.earlierProcessKey("b:1", 5) {
		t.Fatal("a key at another address is called this address's")
	}
}
