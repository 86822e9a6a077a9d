package sequencer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"orderlog/internal/event"
	"orderlog/internal/keys"
)

// Config configures a sequencer node (leader or standby).
type Config struct {
	// Address is this node's gRPC address, published as the election value
	// so ingest nodes and readers can find the leader.
	Address string
	Etcd    *clientv3.Client
	Ledgers LedgerControl
	// SessionTTL is the election session's etcd lease TTL in seconds: a
	// leader that dies is replaced about this long after. Default 2.
	SessionTTL int
	// Machine tunes grants and the commit log; its Epoch is set on election.
	Machine MachineConfig
	// TickInterval is how often the machine's clock advances. Default 10 ms.
	TickInterval time.Duration
	// RetainRecords bounds the commit records kept for commit-map streams
	// below the newest checkpoint's end (those above it are all kept, up
	// to 4× this while checkpoints fail: commitMap). Default 1<<20.
	RetainRecords int
	// Logger logs failures the node retries by itself; nil discards them.
	// Leader changes are events: log them with event.Logging in Events.
	Logger *slog.Logger
	// Events is told of leader changes and epochs.
	Events event.Listener
	// ProbeLeader, if set, lets a standby find the leader's process gone
	// and revoke its election lease rather than wait out the TTL
	// (evict.go). Real nodes use ProbeGRPC.
	ProbeLeader LeaderProbe
	// Heard, if set, is what this process's grant streams heard from the
	// leaders: a leader heard within leaderSilentFor is not deposed for
	// unanswered probes (heard.go).
	Heard *LeaderHeard
	// Checkpoint configures commit-log checkpoints (checkpoint.go); they
	// are written only when Ledgers implements CheckpointLedgers.
	Checkpoint CheckpointConfig
}

// Validate fills defaults and rejects nonsense.
func (c *Config) Validate() error {
	if c.Etcd == nil || c.Ledgers == nil {
		return errors.New("sequencer: Etcd and Ledgers are required")
	}
	if c.SessionTTL == 0 {
		c.SessionTTL = 2
	}
	if c.TickInterval == 0 {
		c.TickInterval = 10 * time.Millisecond
	}
	if c.RetainRecords == 0 {
		c.RetainRecords = 1 << 20
	}
	if err := c.Checkpoint.Validate(); err != nil {
		return err
	}
	c.Logger = event.OrDiscard(c.Logger)
	c.Events.EnsureDefaults()
	c.Machine.Epoch = 1 // validated with a placeholder; set per election
	if err := c.Machine.Validate(); err != nil {
		return err
	}
	c.Machine.Epoch = 0
	if c.SessionTTL < 1 || c.TickInterval < 0 || c.RetainRecords < 2 {
		return errors.New("sequencer: invalid SessionTTL, TickInterval or RetainRecords")
	}
	return nil
}

// Node campaigns for sequencer leadership and, while leader, runs the
// grant service and the commit log. Serve it with NewService.
type Node struct {
	cfg   Config
	start time.Time // origin of the monotonic clock fed to machines
	// sessionLost is set when a term ended with its session lost, until
	// the next session campaigns (logged at Info then).
	sessionLost atomic.Bool
	mu          struct {
		sync.Mutex
		leader *leader
		nextID SessionID
		// session is the current term's election session (nil between
		// terms); takingOver is the epoch being taken over (0: none).
		session    *electionSession
		takingOver uint64
		// leases are the election leases this process granted (the
		// newest maxHeldLeases): a key with one of them is its own, stale
		// unless it is the current term's.
		leases []clientv3.LeaseID
		// evicted is this node's last revocation of a leader (evict.go).
		evicted eviction
		// firstGrant is the etcd revision of this process's first
		// election lease (0: none yet).
		firstGrant int64
	}
	// replays keeps the replay of the closed commit ledgers (replay_cache.go).
	replays replayCache
	// checkpoints is what the metrics say of checkpoints (checkpoint_metrics.go).
	checkpoints checkpointStats
	// writerCloses counts the ledgers writers closed, by how the leader
	// learned their spans (leader_async.go).
	writerCloses struct{ settled, readBack atomic.Int64 }
	// checkpointStep, set by tests before Run, is called after each step
	// of a checkpoint; an error stops the checkpoint there, as a crash
	// would.
	checkpointStep func(step string) error
}

// NewNode returns a node; Run makes it campaign.
func NewNode(cfg Config) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Node{cfg: cfg, start: time.Now()}, nil
}

// Run campaigns, leads while elected, and campaigns again after losing
// leadership, until ctx ends.
func (n *Node) Run(ctx context.Context) error {
	var warm sync.WaitGroup
	defer warm.Wait()
	warm.Go(func() { n.warmReplays(ctx) })
	for ctx.Err() == nil {
		if err := n.term(ctx); err != nil && ctx.Err() == nil {
			n.cfg.Logger.Warn("sequencer term failed; campaigning again", "addr", n.cfg.Address, "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return nil
}

// term is one election session: one campaign and, if won, one term as
// leader. It ends when the session is lost (etcd let its lease expire or
// revoked it): a standby then stops waiting in its campaign, whose key went
// with the lease, and Run starts a new session.
func (n *Node) term(ctx context.Context) error {
	sess, err := n.newSession(ctx)
	if err != nil {
		return fmt.Errorf("election session: %w", err)
	}
	defer sess.Close()
	n.setSession(sess)
	defer n.setSession(nil)
	defer n.noteSessionLost(ctx, sess)
	level := slog.LevelDebug // a term that failed is logged by Run already
	if n.sessionLost.Swap(false) {
		level = slog.LevelInfo
	}
	n.cfg.Logger.Log(ctx, level, "sequencer campaigning", "addr", n.cfg.Address, "lease", fmt.Sprintf("%x", int64(sess.Lease())))
	el := concurrency.NewElection(sess.Session, keys.SeqElection)
	if err := n.campaign(ctx, sess, el); err != nil {
		return err
	}
	err = n.lead(ctx, sess, uint64(el.Rev()), el.Key())
	rctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	el.Resign(rctx)
	return err
}

// errSessionLost: the election session's lease expired or was revoked.
var errSessionLost = errors.New("sequencer: etcd election session lost")

// campaign waits to win the election for as long as sess lives. Campaign
// alone would wait on: its key is gone with a lost lease, but it waits for
// the keys ahead of it, which may well live on.
func (n *Node) campaign(ctx context.Context, sess *electionSession, el *concurrency.Election) error {
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-sess.Done():
			cancel()
		case <-cctx.Done():
		}
	}()
	go n.evictGoneLeader(cctx, el, sess.Lease())
	err := el.Campaign(cctx, n.cfg.Address)
	select {
	case <-sess.Done():
		return errSessionLost
	default:
	}
	if err != nil {
		return fmt.Errorf("campaign: %w", err)
	}
	return nil
}

// noteSessionLost fires LeaseLost if the term ended because its session
// was lost (not because the node stops).
func (n *Node) noteSessionLost(ctx context.Context, sess *electionSession) {
	select {
	case <-sess.Done():
		if ctx.Err() == nil {
			n.sessionLost.Store(true)
			n.cfg.Events.LeaseLost(event.LeaseInfo{Holder: "sequencer " + n.cfg.Address, LeaseID: int64(sess.Lease())})
		}
	default:
	}
}

// lead runs steps 1–6 of §5 and then serves until deposed or ctx ends.
func (n *Node) lead(ctx context.Context, sess *electionSession, epoch uint64, electionKey string) error {
	elected := time.Now()
	n.setTakingOver(epoch)
	defer n.setTakingOver(0)
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-sess.Done(): // the election lease is gone: so is leadership
			cancel()
		case <-lctx.Done():
		}
	}()
	store := &epochStore{cli: n.cfg.Etcd, epoch: epoch, electionKey: electionKey}
	// Step 1: no ledger of an older epoch can be created from now on.
	if err := store.writeEpoch(lctx); err != nil {
		return err
	}
	epochWritten := time.Now()
	// Step 2: fence, recover and replay the previous commit ledgers after
	// the newest checkpoint, on top of its state.
	head, kept, replayed, entries, err := n.replayLog(lctx)
	if err != nil {
		return err
	}
	list, listRev := head.list, head.listRev
	replayDone := time.Now()
	// Step 3: R, and the older ledgers.
	t, err := n.takeover(lctx, store, epoch, replayed.C, list)
	if err != nil {
		return err
	}
	olderDone := time.Now()
	l := &leader{node: n, epoch: epoch, store: store, ctl: n.cfg.Ledgers, ctx: lctx, cancel: cancel, confirm: make(chan struct{}, 1),
		electionKey: electionKey}
	l.lac.Store(-1)
	if err := l.startFromCheckpoint(lctx, head); err != nil {
		return err
	}
	commit, err := n.cfg.Ledgers.CreateCommitLog(lctx, epoch, electionKey, l.onConfirm)
	if err != nil {
		return err
	}
	l.commit = commit
	if l.list, l.listRev, err = store.addCommitLedger(lctx, list, listRev, commit.ID()); err != nil {
		ctx, c := context.WithTimeout(context.Background(), time.Second)
		commit.Close(ctx)
		c()
		return err
	}
	// Where a takeover's time goes, for an operator tracing a slow one.
	n.cfg.Logger.Info("sequencer takeover steps", "epoch", epoch, "write_epoch", epochWritten.Sub(elected),
		"replay", replayDone.Sub(epochWritten), "checkpoint", head.pointer.Ledger, "commit_ledgers", len(kept.Ledgers), "entries_read", entries,
		"older_ledgers", olderDone.Sub(replayDone), "unclosed", len(t.Unclosed), "closed", len(t.Closed),
		"new_commit_ledger", time.Since(olderDone))
	mcfg := n.cfg.Machine
	mcfg.Epoch = epoch
	m, err := NewMachine(mcfg, t, l.now())
	if err != nil {
		return err
	}
	settled := replayed.Settled()
	l.cm = newCommitMap(n.cfg.RetainRecords, settled, replayed.C, epoch, head.pointer.End)
	// The replayed records came after the last checkpoint: they count
	// toward the next one. A takeover that replayed more than the map
	// keeps trims it above the checkpoint, and readers below wait for the
	// next checkpoint; counted from zero, it was not due until as many
	// records again came in (a test's reader waited 30 s for it in vain).
	l.mu.recordsSince = len(settled)
	n.noteCheckpoint(head.pointer, 0)
	l.mu.m = m
	l.mu.streams = make(map[SessionID]*grantStream)
	l.mu.byInc = make(map[string]*grantStream)
	// Steps 4–6 run inside the machine: close/recover older ledgers,
	// resolve [C₀, R), confirm Watermark(R), reserve, then grant.
	l.mu.Lock()
	l.handleLocked()
	l.mu.Unlock()
	n.setLeader(l)
	n.setTakingOver(0)
	n.cfg.Events.LeaderElected(event.LeaderInfo{Address: n.cfg.Address, Epoch: epoch, C0: t.C0, Reserved: t.Reserved,
		UnclosedLedgers: len(t.Unclosed), Took: time.Since(elected)})
	l.run()
	n.setLeader(nil)
	l.shutdown()
	n.cfg.Events.LeaderLost(event.LeaderInfo{Address: n.cfg.Address, Epoch: epoch, Reason: l.endReason(ctx, sess),
		Took: time.Since(elected)})
	return nil
}

// replayLog is step 2 of a takeover: it reads the checkpoint pointer and
// the commit-ledger list, fences, recovers and replays the list from the
// checkpoint's FirstKept on top of its state (from the replay cache's
// prefix on), and keeps the replay (every ledger is closed now).
func (n *Node) replayLog(ctx context.Context) (head commitLogHead, kept commitLedgerList, replayed CommitMap, entries int, err error) {
	if head, err = readHead(ctx, n.cfg.Etcd); err != nil {
		return
	}
	if kept, err = head.kept(); err != nil {
		return
	}
	base := n.replayBase(head.pointer)
	if replayed, _, entries, err = n.replays.replayFrom(ctx, base, kept.ids(), n.cfg.Ledgers.ReadCommitLog); err != nil {
		return
	}
	n.replays.keepFrom(base.ledger, kept.ids(), replayed)
	return
}

func (n *Node) takeover(ctx context.Context, store *epochStore, epoch, c0 uint64, list commitLedgerList) (Takeover, error) {
	r, err := store.readReserved(ctx)
	if err != nil {
		return Takeover{}, err
	}
	t := Takeover{C0: c0, Reserved: max(r, c0)}
	var closedIDs []uint64
	var commitIDs []uint64
	for _, cl := range list.Ledgers {
		commitIDs = append(commitIDs, cl.Ledger)
	}
	t.Unclosed, closedIDs, err = n.cfg.Ledgers.Older(ctx, epoch, c0, commitIDs)
	if err != nil {
		return Takeover{}, err
	}
	for _, id := range closedIDs {
		spans, err := n.cfg.Ledgers.ClosedSpans(ctx, id)
		if err != nil {
			return Takeover{}, fmt.Errorf("spans of ledger %d: %w", id, err)
		}
		t.Closed = append(t.Closed, ClosedLedger{ID: id, Spans: spans})
	}
	return t, nil
}

func (n *Node) setLeader(l *leader) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.mu.leader = l
}

func (n *Node) setSession(sess *electionSession) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.mu.session = sess
}

func (n *Node) setTakingOver(epoch uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.mu.takingOver = epoch
}

func (n *Node) takingOverEpoch() uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.mu.takingOver
}

func (n *Node) leader() *leader {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.mu.leader
}

func (n *Node) newSessionID() SessionID {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.mu.nextID++
	return n.mu.nextID
}

// Status is a snapshot of a node's role.
type Status struct {
	Leader    bool
	Serving   bool // granting (takeover finished)
	Epoch     uint64
	Published uint64 // the published committed watermark C
}

// Status reports the node's role and, when leader, its epoch and C.
func (n *Node) Status() Status {
	l := n.leader()
	if l == nil {
		return Status{}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return Status{Leader: true, Serving: l.mu.m.Serving(), Epoch: l.epoch, Published: l.mu.m.PublishedC()}
}

// Ready returns nil when the node serves its role: a standby campaigning
// with a live etcd session, or a leader that grants. Otherwise it says what
// the node waits for.
func (n *Node) Ready() error {
	n.mu.Lock()
	sess, takingOver, l := n.mu.session, n.mu.takingOver, n.mu.leader
	n.mu.Unlock()
	if sess == nil {
		return errors.New("sequencer: no etcd election session yet")
	}
	select {
	case <-sess.Done():
		return errors.New("sequencer: etcd election session expired")
	default:
	}
	if takingOver != 0 {
		return fmt.Errorf("sequencer: taking over as leader of epoch %d (replaying the commit log)", takingOver)
	}
	if l != nil {
		if st := n.Status(); !st.Serving {
			return fmt.Errorf("sequencer: leader of epoch %d settling older ledgers before granting", st.Epoch)
		}
	}
	return nil
}

// LeaderAddress returns the address of the current sequencer leader, or ""
// if there is none.
func LeaderAddress(ctx context.Context, cli *clientv3.Client) (string, error) {
	leader, err := Leader(ctx, cli)
	return leader.Addr, err
}

// LeaderKey is the current sequencer leader's election key: its address,
// the key, and the etcd revision it was read at.
type LeaderKey struct {
	Addr, Key string
	Revision  int64
}

// Leader returns the current sequencer leader's key (Addr "" if there is
// none).
func Leader(ctx context.Context, cli *clientv3.Client) (LeaderKey, error) {
	resp, err := cli.Get(ctx, keys.SeqElection+"/", clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend), clientv3.WithLimit(1))
	if err != nil {
		return LeaderKey{}, err
	}
	if len(resp.Kvs) == 0 {
		return LeaderKey{Revision: resp.Header.Revision}, nil
	}
	return LeaderKey{Addr: string(resp.Kvs[0].Value), Key: string(resp.Kvs[0].Key), Revision: resp.Header.Revision}, nil
}
