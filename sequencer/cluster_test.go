package sequencer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"orderlog/ingest/ledger"
	"orderlog/ingest/wal"
	"orderlog/internal/etcdserver"
	"orderlog/internal/keys"
	pb "orderlog/proto/sequencerpb"
)

// testCluster is embedded etcd, three in-process WAL stores on loopback
// gRPC, and sequencer nodes, all real.
type testCluster struct {
	t       *testing.T
	etcd    *etcdserver.Server
	cli     *clientv3.Client
	members []ledger.Member
	// chooseCommit, if set, places each new commit ledger (else members).
	chooseCommit func(context.Context) ([]ledger.Member, error)
	dialer       *ledger.GRPCDialer
	// configure, if set, changes each new node's Config; checkpointStep,
	// if set, is each new node's checkpoint hook (Node.checkpointStep).
	configure      func(*Config)
	checkpointStep func(n *Node, step string) error
	mu             sync.Mutex
	clients        []*clientv3.Client
}

func newTestCluster(t *testing.T) *testCluster {
	t.Helper()
	srv, err := etcdserver.Start(etcdserver.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	c := &testCluster{t: t, etcd: srv, dialer: ledger.NewGRPCDialer()}
	t.Cleanup(func() {
		c.mu.Lock()
		for _, cli := range c.clients {
			cli.Close()
		}
		c.mu.Unlock()
		c.dialer.Close()
		srv.Close()
	})
	c.cli = c.newClient()
	for i := 0; i < 3; i++ {
		c.members = append(c.members, c.startStore())
	}
	return c
}

func (c *testCluster) newClient() *clientv3.Client {
	cli, err := c.etcd.NewClient()
	if err != nil {
		c.t.Fatal(err)
	}
	c.mu.Lock()
	c.clients = append(c.clients, cli)
	c.mu.Unlock()
	return cli
}

func (c *testCluster) startStore() ledger.Member {
	store, err := wal.Open(wal.Config{Dir: c.t.TempDir()})
	if err != nil {
		c.t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		c.t.Fatal(err)
	}
	srv := wal.Serve(lis, store)
	c.t.Cleanup(func() { srv.Stop(); store.Close() })
	return ledger.Member{StoreID: store.StoreID(), Incarnation: store.Incarnation(), Address: lis.Addr().String()}
}

func (c *testCluster) ledgerControl(cli *clientv3.Client) *LedgerClient {
	return &LedgerClient{Etcd: cli, Stores: c.dialer, Writer: "sequencer",
		Replication: CommitReplication{Ensemble: c.members, Choose: c.chooseCommit, AckQuorum: 2, Tolerate: 1}}
}

// testNode is one in-process sequencer node with its own etcd client and
// gRPC server.
type testNode struct {
	node    *Node
	ledgers *recordingLedgers
	addr    string
	terms   *termEvents
	cancel  context.CancelFunc
	done    chan struct{}
}

func (c *testCluster) startNode() *testNode { return c.startNodeWith(MachineConfig{}) }

func (c *testCluster) startNodeWith(mcfg MachineConfig) *testNode {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		c.t.Fatal(err)
	}
	cli := c.newClient()
	terms := newTermEvents()
	ledgers := &recordingLedgers{LedgerClient: c.ledgerControl(cli)}
	// No checkpoints unless a test configures them: the tests of failover,
	// rolls and replays count commit ledgers and read the map from 0.
	cfg := Config{Address: lis.Addr().String(), Etcd: cli, Ledgers: ledgers,
		Machine: mcfg, Logger: testLogger(c.t), Events: terms.listener(), Checkpoint: noCheckpoints}
	if c.configure != nil {
		c.configure(&cfg)
	}
	n, err := NewNode(cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	if hook := c.checkpointStep; hook != nil {
		n.checkpointStep = func(step string) error { return hook(n, step) }
	}
	srv := grpc.NewServer()
	Register(srv, n)
	go srv.Serve(lis)
	ctx, cancel := context.WithCancel(context.Background())
	tn := &testNode{node: n, addr: lis.Addr().String(), cancel: cancel, done: make(chan struct{}), terms: terms, ledgers: ledgers}
	go func() { defer close(tn.done); n.Run(ctx) }()
	c.t.Cleanup(func() { cancel(); srv.Stop(); <-tn.done })
	return tn
}

// waitServing waits until some node of nodes serves grants and returns it.
func (c *testCluster) waitServing(nodes ...*testNode) *testNode {
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		for _, n := range nodes {
			if n.node.Status().Serving {
				return n
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	c.t.Fatal("no sequencer node became serving")
	return nil
}

// revokeLeader revokes the etcd lease of the current election leader key:
// the leader's session dies as if its node were cut off.
func (c *testCluster) revokeLeader(ctx context.Context) {
	resp, err := c.cli.Get(ctx, keys.SeqElection+"/", clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend), clientv3.WithLimit(1))
	if err != nil || len(resp.Kvs) == 0 {
		c.t.Fatalf("leader key: %v", err)
	}
	if _, err := c.cli.Revoke(ctx, clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
		c.t.Fatal(err)
	}
}

// testIngest is a minimal ingest writer: liveness key on a lease, one open
// ledger, one grant stream to the leader, synchronous grant → append →
// confirm → Written.
type testIngest struct {
	t     *testing.T
	c     *testCluster
	inc   string
	lease clientv3.LeaseID
	conn  *grpc.ClientConn
	gc    *GrantClient
	w     *ledger.Writer
	epoch uint64
	req   uint64
	acked []EntrySpan
	ledOf map[int]uint64 // index in acked → ledger id
	// lastEnd is the end of the last grant on the current stream: grants
	// on one stream come with increasing offsets.
	lastEnd uint64
	// closeRequests counts CloseLedgerRequests received.
	closeRequests int
}

func (c *testCluster) newIngest(ctx context.Context, name string) *testIngest {
	// The ingest stays alive until a test revokes its lease: a lease that
	// runs out mid-test (nothing renews it) would make a slow run's
	// grants fail for a reason the test did not choose.
	lease, err := c.cli.Grant(ctx, 600)
	if err != nil {
		c.t.Fatal(err)
	}
	if _, err := c.cli.Put(ctx, keys.Ingest(name), "alive", clientv3.WithLease(lease.ID)); err != nil {
		c.t.Fatal(err)
	}
	in := &testIngest{t: c.t, c: c, inc: name, lease: lease.ID, ledOf: map[int]uint64{}}
	c.t.Cleanup(in.disconnect)
	return in
}

func (in *testIngest) disconnect() {
	if in.gc != nil {
		in.gc.Close()
		in.gc = nil
	}
	if in.conn != nil {
		in.conn.Close()
		in.conn = nil
	}
}

// connect opens a grant stream to the current leader and a ledger of its epoch.
func (in *testIngest) connect(ctx context.Context) error {
	in.disconnect()
	addr, err := LeaderAddress(ctx, in.c.cli)
	if err != nil || addr == "" {
		return fmt.Errorf("no leader: %v", err)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	in.conn = conn
	in.lastEnd = 0
	gc, err := DialGrant(ctx, pb.NewSequencerClient(conn), in.inc, int64(in.lease))
	if err != nil {
		return err
	}
	in.gc = gc
	resp, err := in.c.cli.Get(ctx, keys.SeqEpoch)
	if err != nil || len(resp.Kvs) == 0 {
		return fmt.Errorf("read epoch: %v", err)
	}
	epoch, _ := strconv.ParseUint(string(resp.Kvs[0].Value), 10, 64)
	w, err := ledger.Create(ctx, in.c.cli, ledger.CreateOptions{
		Epoch: int64(epoch), WriterIncarnation: in.inc, Ensemble: in.c.members, AckQuorum: 2, Tolerate: 1, Stores: in.c.dialer,
	})
	if err != nil {
		return err
	}
	in.t.Cleanup(func() { stopWriter(w) })
	in.w, in.epoch = w, epoch
	return nil
}

// stopWriter ends the goroutines of a ledger writer the test left open
// (replaced after a failover, or fenced), without recording anything: Close
// with a context that is already done stops the writer's loops, then fails
// before it reaches etcd. A writer the test closed answers ErrClosed.
func stopWriter(w *ledger.Writer) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, _ = w.Close(ctx)
}

// grant asks for n offsets on the current ledger and waits for the reply.
func (in *testIngest) grant(ctx context.Context, n uint64) (Range, error) {
	in.req++
	in.gc.Grant(in.req, in.w.ID(), n)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		select {
		case <-ctx.Done():
			return Range{}, ctx.Err()
		case f, ok := <-in.gc.Frames():
			if !ok {
				return Range{}, fmt.Errorf("grant stream ended: %w", in.gc.Err())
			}
			for _, g := range f.Grants {
				if g.RequestId != in.req {
					continue
				}
				if g.Status != pb.GrantStatus_GRANTED {
					return Range{}, fmt.Errorf("grant refused: %v", g.Status)
				}
				if f.Epoch != in.epoch {
					return Range{}, fmt.Errorf("grant of epoch %d for a ledger of epoch %d", f.Epoch, in.epoch)
				}
				r := rangeFromProto(g.Range)
				if r.First < in.lastEnd || r.Len() != n {
					in.t.Fatalf("grant %v of %d after a grant ending at %d on the same stream", r, n, in.lastEnd)
				}
				in.lastEnd = r.End
				return r, nil
			}
			in.closeRequests += len(f.Close)
		}
	}
}

// write appends the batch for r, waits until it is confirmed, reports it
// Written and records it as acknowledged.
func (in *testIngest) write(ctx context.Context, r Range) error {
	id, err := in.w.Append([]byte(fmt.Sprintf("batch %v", r)), ledger.Span{First: r.First, End: r.End})
	if err != nil {
		return err
	}
	if err := in.w.WaitConfirmed(ctx, id); err != nil {
		return err
	}
	in.gc.Written(in.w.ID(), id, r)
	in.ledOf[len(in.acked)] = in.w.ID()
	in.acked = append(in.acked, EntrySpan{Entry: id, Range: r})
	return nil
}

// produce writes batches through the current leader. On a loaded machine
// the leader's session may lapse at any time; a failed grant or write is
// then retried on the new leader with a new ledger (never acknowledged
// twice: only a confirmed write is recorded).
func (in *testIngest) produce(ctx context.Context, batches int) {
	in.t.Helper()
	for i := 0; i < batches; i++ {
		n := uint64(1 + i%7)
		r, err := in.grant(ctx, n)
		if err != nil {
			r = in.grantAfterFailover(ctx, in.t, n)
		}
		in.writeOrRegrant(ctx, r)
	}
}

// writeOrRegrant writes r; if that fails (the ledger was closed under a
// leader change), it writes the batch under a new grant instead.
func (in *testIngest) writeOrRegrant(ctx context.Context, r Range) {
	for in.write(ctx, r) != nil {
		r = in.grantAfterFailover(ctx, in.t, r.Len())
	}
}

// readCommitMap follows the current leader's commit-map stream from offset
// 0 until the watermark reaches atLeast, and returns offset → record plus
// C. If the stream breaks (a leader change on a loaded machine), it starts
// over on the new leader: the retained map is complete from offset 0.
func readCommitMap(ctx context.Context, t *testing.T, cli *clientv3.Client, atLeast uint64) (map[uint64]EpochRecord, uint64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		decided, c, err := readCommitMapOnce(ctx, t, cli, atLeast)
		if err == nil {
			return decided, c
		}
		if time.Now().After(deadline) {
			t.Fatalf("commit map: %v (C=%d, want ≥ %d)", err, c, atLeast)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func readCommitMapOnce(ctx context.Context, t *testing.T, cli *clientv3.Client, atLeast uint64) (map[uint64]EpochRecord, uint64, error) {
	addr, err := LeaderAddress(ctx, cli)
	if err != nil || addr == "" {
		return nil, 0, fmt.Errorf("no leader: %v", err)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, 0, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	stream, err := pb.NewSequencerClient(conn).CommitMap(ctx, &pb.CommitMapRequest{FromOffset: 0})
	if err != nil {
		return nil, 0, err
	}
	decided := map[uint64]EpochRecord{}
	var c uint64
	for c < atLeast {
		f, err := stream.Recv()
		if err != nil {
			return nil, c, err
		}
		for _, p := range f.Records {
			r := RecordFromProto(p)
			if r.Kind == KindWatermark {
				c = max(c, r.Watermark)
				continue
			}
			for x := r.Range.First; x < r.Range.End; x++ {
				if old, ok := decided[x]; ok && (old.Kind != r.Kind || old.Ledger != r.Ledger || old.Entry != r.Entry) {
					t.Fatalf("offset %d decided %v then %v", x, old, r)
				}
				decided[x] = r
			}
		}
	}
	return decided, c, nil
}

// checkCommitMap checks the map against what the ingest nodes saw: every
// acknowledged offset is Written at its (ledger, entry); every offset below
// C is decided; holes only where nothing was acknowledged.
func checkCommitMap(t *testing.T, decided map[uint64]EpochRecord, c uint64, ingests ...*testIngest) (holes int) {
	t.Helper()
	acked := map[uint64][2]int64{}
	for _, in := range ingests {
		for i, a := range in.acked {
			for x := a.Range.First; x < a.Range.End; x++ {
				acked[x] = [2]int64{int64(in.ledOf[i]), a.Entry}
			}
		}
	}
	for x := uint64(0); x < c; x++ {
		r, ok := decided[x]
		if !ok {
			t.Fatalf("offset %d below C=%d undecided", x, c)
		}
		a, wasAcked := acked[x]
		switch {
		case wasAcked && (r.Kind != KindWritten || r.Ledger != uint64(a[0]) || r.Entry != a[1]):
			t.Fatalf("acknowledged offset %d in %d/%d decided %v", x, a[0], a[1], r)
		case !wasAcked && r.Kind == KindWritten:
			t.Fatalf("offset %d Written (%v) but never acknowledged", x, r)
		case r.Kind == KindHole:
			holes++
		}
	}
	for x := range acked {
		if x >= c {
			t.Fatalf("acknowledged offset %d not below C=%d", x, c)
		}
	}
	return holes
}

func newEtcdClient(endpoint string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second})
}

// failingCommits is the real ledger control whose commit logs report a
// forced error once broken is set.
type failingCommits struct {
	*LedgerClient
	broken atomic.Bool
}

type breakableCommitLog struct {
	CommitLog
	broken *atomic.Bool
}

func (b breakableCommitLog) Err() error {
	if b.broken.Load() {
		return errors.New("test: commit ledger broken")
	}
	return b.CommitLog.Err()
}

func (f *failingCommits) CreateCommitLog(ctx context.Context, epoch uint64, electionKey string, onConfirm func(int64)) (CommitLog, error) {
	log, err := f.LedgerClient.CreateCommitLog(ctx, epoch, electionKey, onConfirm)
	if err != nil {
		return nil, err
	}
	return breakableCommitLog{CommitLog: log, broken: &f.broken}, nil
}

// TestLeaderStepsDownWhenItsCommitLedgerFails: a commit ledger that fails
// while an entry waits for confirmation reports it through no Append, so
// the leader must notice it by itself and step down, and a new term (with
// a new commit ledger) serves again; else C would stand still for good.
func TestLeaderStepsDownWhenItsCommitLedgerFails(t *testing.T) {
	c := newTestCluster(t)
	cli := c.newClient()
	ledgers := &failingCommits{LedgerClient: c.ledgerControl(cli)}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	terms := newTermEvents()
	n, err := NewNode(Config{Address: lis.Addr().String(), Etcd: cli, Ledgers: ledgers, Logger: testLogger(t), Events: terms.listener(),
		Checkpoint: noCheckpoints})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); n.Run(ctx) }()
	defer func() { cancel(); <-done }()
	tn := &testNode{node: n, addr: lis.Addr().String()}
	first := c.waitServing(tn).node.Status().Epoch
	ledgers.broken.Store(true)
	lost := terms.waitLost(t, first)
	if !strings.Contains(lost.Reason, "commit ledger") {
		t.Fatalf("epoch %d ended with reason %q, want its commit ledger's failure", first, lost.Reason)
	}
	ledgers.broken.Store(false) // the next term's commit ledger works
	elected := terms.waitElected(t, first+1)
	deadline := time.Now().Add(20 * time.Second)
	for !n.Status().Serving || n.Status().Epoch != elected.Epoch {
		if time.Now().After(deadline) {
			t.Fatalf("epoch %d elected after the failure never served (status %+v)", elected.Epoch, n.Status())
		}
		if n.Status().Epoch > elected.Epoch { // that term broke too: follow the next
			elected = terms.waitElected(t, n.Status().Epoch)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// recordingLedgers records the commit ledgers a node read in a takeover.
type recordingLedgers struct {
	*LedgerClient
	mu    sync.Mutex
	reads []uint64
	// entries counts the entries those reads returned.
	entries int
}

func (r *recordingLedgers) ReadCommitLog(ctx context.Context, id uint64) ([][]byte, error) {
	r.mu.Lock()
	r.reads = append(r.reads, id)
	r.mu.Unlock()
	p, err := r.LedgerClient.ReadCommitLog(ctx, id)
	r.mu.Lock()
	r.entries += len(p)
	r.mu.Unlock()
	return p, err
}

// takeoverEntries returns and forgets the entries read so far.
func (r *recordingLedgers) takeoverEntries() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.entries
	r.entries = 0
	return n
}

// takeoverReads returns and forgets the commit ledgers read so far.
func (r *recordingLedgers) takeoverReads() []uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	reads := r.reads
	r.reads = nil
	return reads
}

// noCheckpoints is the checkpoint configuration of tests that do not test
// checkpoints.
var noCheckpoints = CheckpointConfig{Records: -1}
