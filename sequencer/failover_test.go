package sequencer

import (
	"cmp"
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"orderlog/ingest/ledger"
)

// grantAfterFailover retries connecting to whichever node leads and asking
// for a grant until one is granted; it returns the grant.
func (in *testIngest) grantAfterFailover(ctx context.Context, t *testing.T, n uint64) Range {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if err := in.connect(ctx); err == nil {
			gctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			r, err := in.grant(gctx, n)
			cancel()
			if err == nil {
				return r
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("no grant after failover")
	return Range{}
}

// checkFailover runs the common part of the failover tests: the ingest
// wrote through the old leader, holds one grant of it unwritten, the old
// leader is lost (lose), and then:
//   - the new leader grants with a higher epoch;
//   - the held grant of the old leader can no longer be confirmed;
//   - the commit map has every acknowledged offset Written and holes only
//     for offsets never acknowledged (the held grant among them).
func checkFailover(ctx context.Context, t *testing.T, c *testCluster, in *testIngest, oldEpoch uint64, lose func(), standbys ...*testNode) {
	t.Helper()
	in.produce(ctx, 20)
	held, err := in.grant(ctx, 5)
	if err != nil { // the leader lapsed by itself (a loaded machine): hold one of the next
		held = in.grantAfterFailover(ctx, t, 5)
	}
	oldEpoch = max(oldEpoch, in.epoch)
	oldWriter := in.w

	start := time.Now()
	lose()
	r := in.grantAfterFailover(ctx, t, 3)
	failover := time.Since(start)

	addr, err := LeaderAddress(ctx, c.cli)
	if err != nil {
		t.Fatal(err)
	}
	var leader *testNode
	for _, n := range standbys {
		if n.addr == addr {
			leader = n
		}
	}
	if leader == nil {
		t.Fatalf("leader %q is none of the standbys", addr)
	}
	st := leader.node.Status()
	if st.Epoch <= oldEpoch || in.epoch <= oldEpoch {
		t.Fatalf("new epoch %d (ingest ledger epoch %d), old %d", st.Epoch, in.epoch, oldEpoch)
	}
	// The held grant's ledger was closed by the new leader before its first
	// grant: writing the grant now can never be confirmed.
	id, err := oldWriter.Append([]byte("late"), ledger.Span{First: held.First, End: held.End})
	if err == nil {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err = oldWriter.WaitConfirmed(wctx, id)
		cancel()
	}
	if err == nil {
		t.Fatalf("old leader's grant %v was confirmed after failover", held)
	}
	in.writeOrRegrant(ctx, r)
	in.produce(ctx, 20)

	end := in.acked[len(in.acked)-1].Range.End
	decided, cw := readCommitMap(ctx, t, c.cli, end)
	holes := checkCommitMap(t, decided, cw, in)
	for x := held.First; x < held.End; x++ {
		if decided[x].Kind != KindHole {
			t.Fatalf("held grant offset %d decided %v, want a hole", x, decided[x])
		}
	}
	t.Logf("failover (leader loss → first grant of epoch %d): %v; C=%d, %d hole offsets, %d acknowledged batches",
		st.Epoch, failover, cw, holes, len(in.acked))
}

func TestFailoverAfterLeaderSessionLoss(t *testing.T) {
	ctx := context.Background()
	c := newTestCluster(t)
	a := c.startNode()
	first := c.waitServing(a)
	b := c.startNode()
	in := c.newIngest(ctx, "ingest-1")
	if err := in.connect(ctx); err != nil {
		t.Fatal(err)
	}
	oldEpoch := first.node.Status().Epoch
	checkFailover(ctx, t, c, in, oldEpoch, func() { c.revokeLeader(ctx) }, a, b)
	if b.node.Status().Epoch <= oldEpoch {
		t.Fatalf("standby did not take over: %+v", b.node.Status())
	}
	// The events say the same, with the ids an operator follows: the old
	// term ended (its session expired, or the new leader fenced its commit
	// ledger before the old one heard of the expiry), the standby was
	// elected.
	lost := first.terms.waitLost(t, oldEpoch)
	if lost.Epoch != oldEpoch || lost.Address != first.addr ||
		lost.Reason != "etcd election session expired" && !strings.Contains(lost.Reason, "fenced") {
		t.Fatalf("old leader's LeaderLost %+v", lost)
	}
	if elected := b.terms.waitElected(t, oldEpoch+1); elected.Address != b.addr {
		t.Fatalf("standby's LeaderElected %+v", elected)
	}
}

// Environment of the child sequencer process.
const (
	childEtcdEnv   = "ORDERLOG_SEQ_CHILD_ETCD"
	childStoresEnv = "ORDERLOG_SEQ_CHILD_STORES"
	childAddrEnv   = "ORDERLOG_SEQ_CHILD_ADDR"
)

// TestSequencerChildProcess is not a test: it is the body of the child
// process TestFailoverAfterLeaderProcessKill starts and kills.
func TestSequencerChildProcess(t *testing.T) {
	endpoint := os.Getenv(childEtcdEnv)
	if endpoint == "" {
		t.Skip("runs only as the child of TestFailoverAfterLeaderProcessKill")
	}
	var members []ledger.Member
	if err := json.Unmarshal([]byte(os.Getenv(childStoresEnv)), &members); err != nil {
		t.Fatal(err)
	}
	c := &testCluster{t: t, members: members, dialer: ledger.NewGRPCDialer()}
	cli, err := newEtcdClient(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", os.Getenv(childAddrEnv))
	if err != nil {
		t.Fatal(err)
	}
	n, err := NewNode(Config{Address: lis.Addr().String(), Etcd: cli, Ledgers: c.ledgerControl(cli), Logger: testLogger(t),
		Checkpoint: noCheckpoints})
	if err != nil {
		t.Fatal(err)
	}
	serveUntilKilled(lis, n)
}

func TestFailoverAfterLeaderProcessKill(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a child process and waits out the session TTL")
	}
	ctx := context.Background()
	c := newTestCluster(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	childAddr := lis.Addr().String()
	lis.Close()
	stores, _ := json.Marshal(c.members)
	cmd := exec.Command(os.Args[0], "-test.run=^TestSequencerChildProcess$", "-test.v")
	cmd.Env = append(os.Environ(), childEtcdEnv+"="+c.etcd.Endpoint(), childStoresEnv+"="+string(stores), childAddrEnv+"="+childAddr)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })

	// Wait until the child leads and grants.
	in := c.newIngest(ctx, "ingest-1")
	deadline := time.Now().Add(30 * time.Second)
	for {
		addr, _ := LeaderAddress(ctx, c.cli)
		if addr == childAddr && in.connect(ctx) == nil {
			gctx, cancel := context.WithTimeout(ctx, time.Second)
			r, err := in.grant(gctx, 1)
			cancel()
			if err == nil {
				if err := in.write(ctx, r); err != nil {
					t.Fatal(err)
				}
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("child sequencer never served; its output:\n%s", out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	oldEpoch := in.epoch
	b := c.startNode()
	checkFailover(ctx, t, c, in, oldEpoch, func() {
		if err := cmd.Process.Kill(); err != nil { // SIGKILL: no resign, no lease revoke
			t.Fatal(err)
		}
	}, b)
}

// Three sequencer nodes, two ingest nodes. One ingest dies holding an
// unwritten grant (its etcd lease is revoked): the leader closes and
// recovers its ledger, and only that grant becomes a hole. Then the leader
// loses its session twice in a row; each time a standby takes over with a
// higher epoch and the commit map stays consistent.
func TestThreeNodesTwoFailoversAndIngestDeath(t *testing.T) {
	ctx := context.Background()
	c := newTestCluster(t)
	nodes := []*testNode{c.startNode(), c.startNode(), c.startNode()}
	c.waitServing(nodes...)
	a, b := c.newIngest(ctx, "ingest-a"), c.newIngest(ctx, "ingest-b")
	for _, in := range []*testIngest{a, b} {
		if err := in.connect(ctx); err != nil {
			t.Fatal(err)
		}
		in.produce(ctx, 10)
	}
	held, err := b.grant(ctx, 4)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.cli.Revoke(ctx, b.lease); err != nil { // ingest-b is gone
		t.Fatal(err)
	}
	b.disconnect()
	a.produce(ctx, 10)
	// The leader resolves the dead ingest's grant, as a hole.
	decided, cw := readCommitMap(ctx, t, c.cli, a.acked[len(a.acked)-1].Range.End)
	checkCommitMap(t, decided, cw, a, b)
	for x := held.First; x < held.End; x++ {
		if decided[x].Kind != KindHole {
			t.Fatalf("dead ingest's unwritten grant offset %d decided %v", x, decided[x])
		}
	}

	epochs := []uint64{a.epoch}
	for i := 0; i < 2; i++ {
		c.revokeLeader(ctx)
		r := a.grantAfterFailover(ctx, t, 2)
		if a.epoch <= epochs[len(epochs)-1] {
			t.Fatalf("failover %d: epoch %d after %v", i+1, a.epoch, epochs)
		}
		epochs = append(epochs, a.epoch)
		a.writeOrRegrant(ctx, r)
		a.produce(ctx, 10)
	}
	end := a.acked[len(a.acked)-1].Range.End
	decided, cw = readCommitMap(ctx, t, c.cli, end)
	holes := checkCommitMap(t, decided, cw, a, b)
	for x := held.First; x < held.End; x++ {
		if decided[x].Kind != KindHole {
			t.Fatalf("dead ingest's unwritten grant offset %d decided %v", x, decided[x])
		}
	}
	t.Logf("epochs %v, C=%d, %d hole offsets", epochs, cw, holes)
}

// A grant that outlives its lease makes the leader ask the writer, on its
// grant stream, to close the ledger at its LAC; the writer closes and says
// so; the unwritten grant becomes a hole, everything written stays Written.
func TestLeaseExpiryAsksWriterToClose(t *testing.T) {
	ctx := context.Background()
	c := newTestCluster(t)
	// Long enough that none of the first batches, each written to real
	// stores with fsyncs, outlives it on a slow machine; only the held
	// grant below is meant to.
	c.waitServing(c.startNodeWith(MachineConfig{GrantLease: 2 * time.Second}))
	in := c.newIngest(ctx, "ingest-1")
	if err := in.connect(ctx); err != nil {
		t.Fatal(err)
	}
	in.produce(ctx, 5)
	held, err := in.grant(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	// Wait for the close request (heartbeats keep the session alive).
	deadline := time.Now().Add(10 * time.Second)
	for in.closeRequests == 0 {
		select {
		case f := <-in.gc.Frames():
			in.closeRequests += len(f.Close)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("no close request after the grant lease expired")
		}
	}
	closed := in.w.ID()
	m, err := in.w.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if m.LastEntry != in.acked[len(in.acked)-1].Entry {
		t.Fatalf("closed at %d, last acknowledged entry %d", m.LastEntry, in.acked[len(in.acked)-1].Entry)
	}
	in.gc.LedgerClosed(closed)
	// A new ledger for the next batches.
	in.produce(ctx, 3)
	decided, cw := readCommitMap(ctx, t, c.cli, in.acked[len(in.acked)-1].Range.End)
	checkCommitMap(t, decided, cw, in)
	for x := held.First; x < held.End; x++ {
		if decided[x].Kind != KindHole {
			t.Fatalf("expired grant offset %d decided %v", x, decided[x])
		}
	}
}

// TestStandbyTakesOverReadingOnlyTheLastCommitLedger: a standby replays
// the closed commit ledgers while it waits, so its takeover reads only
// the one the previous leader wrote last (and must recover), however long
// the commit log; the commit map it then serves is the whole log's.
func TestStandbyTakesOverReadingOnlyTheLastCommitLedger(t *testing.T) {
	ctx := context.Background()
	c := newTestCluster(t)
	nodes := []*testNode{c.startNode(), c.startNode(), c.startNode()}
	c.waitServing(nodes...)
	in := c.newIngest(ctx, "ingest-a")
	if err := in.connect(ctx); err != nil {
		t.Fatal(err)
	}
	in.produce(ctx, 10)
	for failover := 1; failover <= 2; failover++ {
		list, _, err := (&epochStore{cli: c.cli}).commitLedgers(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ids := list.ids()
		for _, n := range nodes {
			n.ledgers.takeoverReads()
			if n.node.Status().Leader {
				continue
			}
			waitWarmed(t, n, ids[:len(ids)-1])
		}
		c.revokeLeader(ctx)
		in.writeOrRegrant(ctx, in.grantAfterFailover(ctx, t, 2))
		in.produce(ctx, 10)
		// The new leader is the one of the highest epoch (the deposed one
		// may not have noticed yet).
		leader := slices.MaxFunc(nodes, func(a, b *testNode) int {
			return cmp.Compare(a.node.Status().Epoch, b.node.Status().Epoch)
		})
		if reads := leader.ledgers.takeoverReads(); !slices.Equal(reads, ids[len(ids)-1:]) {
			t.Fatalf("failover %d: the new leader read commit ledgers %v of %v; want only the last", failover, reads, ids)
		}
	}
	decided, cw := readCommitMap(ctx, t, c.cli, in.acked[len(in.acked)-1].Range.End)
	checkCommitMap(t, decided, cw, in)
}

// waitWarmed waits until n's replay cache covers the closed ledgers.
func waitWarmed(t *testing.T, n *testNode, closed []uint64) {
	t.Helper()
	deadline := time.Now().Add(4 * warmEvery)
	for {
		if _, covered := n.node.replays.start(closed); covered == len(closed) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("standby %s never replayed the closed commit ledgers %v", n.addr, closed)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// serveUntilKilled serves n's gRPC services on lis and runs it: the body
// of a child leader process, which the parent test kills.
func serveUntilKilled(lis net.Listener, n *Node) {
	srv := grpc.NewServer()
	Register(srv, n)
	go srv.Serve(lis)
	n.Run(context.Background())
}
