package sequencer

import (
	"context"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"orderlog/ingest/ledger"
)

// What the external tests (package sequencer_test, which may import the
// reader) use of the in-package cluster harness.

// TestCluster is a testCluster with an ingest writing through it.
type TestCluster struct {
	c  *testCluster
	in *testIngest
}

// StartCluster starts etcd, three stores, two sequencer nodes configured
// by configure, and a connected ingest.
func StartCluster(t *testing.T, configure func(*Config)) *TestCluster {
	c := newTestCluster(t)
	c.configure = configure
	c.waitServing(c.startNode(), c.startNode())
	in := c.newIngest(context.Background(), "ingest-a")
	if err := in.connect(context.Background()); err != nil {
		t.Fatal(err)
	}
	return &TestCluster{c: c, in: in}
}

// CheckpointEvery is checkpointEvery.
func CheckpointEvery(records int) func(*Config) { return checkpointEvery(records) }

func (tc *TestCluster) Etcd() *clientv3.Client { return tc.c.cli }
func (tc *TestCluster) Stores() ledger.Dialer  { return tc.c.dialer }
func (tc *TestCluster) Produce(batches int)    { tc.in.produce(context.Background(), batches) }
func (tc *TestCluster) RevokeLeader()          { tc.c.revokeLeader(context.Background()) }
func (tc *TestCluster) AckedEnd() uint64       { return tc.in.acked[len(tc.in.acked)-1].Range.End }
func (tc *TestCluster) ProduceAfterFailover(n int) {
	tc.in.writeOrRegrant(context.Background(), tc.in.grantAfterFailover(context.Background(), tc.c.t, 2))
	tc.in.produce(context.Background(), n)
}

// Decided reads the whole map (checkpoint chunks, then the stream) up to
// C ≥ atLeast and checks it against what the ingest acknowledged.
func (tc *TestCluster) Decided(atLeast uint64) (map[uint64]Record, uint64) {
	decided, c := readCheckpointedMap(context.Background(), tc.c.t, tc.c, atLeast)
	checkCommitMap(tc.c.t, decided, c, tc.in)
	out := make(map[uint64]Record, len(decided))
	for x, r := range decided {
		out[x] = r.Record
	}
	return out, c
}
