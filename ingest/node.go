package ingest

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"orderlog/ingest/coordinator"
	"orderlog/ingest/ledger"
	"orderlog/ingest/pipeline"
	"orderlog/internal/event"
)

// EnsembleChooser picks the W stores of a new ledger.
type EnsembleChooser func(ctx context.Context, w int) ([]ledger.Member, error)

// Node is one ingest node: the I/O around its coordination machine
// (package coordinator). All machine state is owned by the loop goroutine;
// other goroutines hand it work through do, and the slow operations the
// machine asks for (etcd writes, ledger opens and closes, takeovers) run on
// goroutines of their own that report back through do.
type Node struct {
	cfg    Config
	etcd   *clientv3.Client
	stores ledger.Dialer
	// silent remembers the stores a takeover's reads found silent (a
	// paused node): later takeovers read them last.
	silent    ledger.SilentStores
	ensemble  EnsembleChooser
	newGrants GrantSessionFactory
	// byteLimited are the topics with a byte limit, whose bytes each
	// ledger counts (SetByteLimitedTopics; nil: none).
	byteLimited atomic.Pointer[map[string]bool]
	// topics knows the partition counts of the topics produced to (used
	// before a frame reaches the loop: safe for concurrent use).
	topics *Topics
	// principals caches the principal each producer is bound to
	// (authorize.go; safe for concurrent use).
	principals producerPrincipals

	// reg is the node's current incarnation. Only the loop goroutine
	// writes it, under regMu; other goroutines read it through current.
	regMu sync.Mutex
	reg   registration

	work chan func() // run on the loop goroutine (do)
	stop chan struct{}
	done chan struct{}
	// leases bounds the renewals of the node's leases: Close ends them
	// after revoking the current one.
	leases     context.Context
	stopLeases context.CancelFunc
	wg         sync.WaitGroup // async helpers (ledger opens, closes, takeovers)

	// Owned by the loop goroutine.
	machine *coordinator.Machine
	// writers are the node's open ledgers: the one the machine appends to
	// (Machine.Ledger) and, during a roll, the next one.
	writers     map[uint64]*openWriter
	roll        rollBackoff
	grantAsked  map[uint64]time.Time // batch id → when its grant was requested
	initWaiters map[uint64]chan coordinator.InitDone
	// releaseWaiters are the Release calls waiting for their answer, by
	// token (numbered with nextInit).
	releaseWaiters map[uint64]chan coordinator.ProducerReleased
	nextInit       uint64
	encoder        coordinator.Encoder
	// initsInFlight counts, by principal, the InitProducers of sessions
	// new here that passed the session limit and are not settled yet
	// (producer_limit.go).
	initsInFlight map[string]int

	// closeReasons says why each ledger the node gave up is closed, for the
	// LedgerClosed event.
	closeReasons map[uint64]string
	// checkingStores is set while checkEnsemble reads the stores.
	checkingStores bool

	logger       *slog.Logger
	events       event.Listener
	ledgerErrors repeatedError // written by openLedger's goroutines
	// lastSchemaWarn (unix nanoseconds) rate-limits validation warn's log.
	lastSchemaWarn atomic.Int64
	metrics        *nodeMetrics
}

// GrantSessionFactory opens the grant session of a node incarnation whose
// liveness key is bound to leaseID; onClose must be called when the
// sequencer asks for a ledger to be closed.
type GrantSessionFactory func(incarnation string, leaseID int64, onClose func(ledgerID uint64)) GrantSession

// NewNode registers the node's liveness key in etcd (bound to a new lease),
// opens its grant session and starts its loop.
func NewNode(ctx context.Context, cfg Config, etcd *clientv3.Client, stores ledger.Dialer, ensemble EnsembleChooser, grants GrantSessionFactory) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	machine, err := coordinator.New(coordinator.Config{DedupWindow: cfg.DedupWindow, Pipeline: cfg.Pipeline,
		ProducerExpiry: cfg.ProducerExpiry})
	if err != nil {
		return nil, err
	}
	cfg.Events.EnsureDefaults()
	n := &Node{
		cfg: cfg, etcd: etcd, stores: stores, ensemble: ensemble, newGrants: grants,
		work: make(chan func(), 1024), stop: make(chan struct{}), done: make(chan struct{}),
		machine: machine, writers: make(map[uint64]*openWriter), grantAsked: make(map[uint64]time.Time),
		initWaiters: make(map[uint64]chan coordinator.InitDone), closeReasons: make(map[uint64]string),
		releaseWaiters: make(map[uint64]chan coordinator.ProducerReleased),
		initsInFlight:  make(map[string]int),
		logger:         event.OrDiscard(cfg.Logger), events: cfg.Events, metrics: newNodeMetrics(),
		topics: NewTopics(etcd),
	}
	n.leases, n.stopLeases = context.WithCancel(context.Background())
	reg, err := n.register(ctx, newIncarnation(cfg.NodeName))
	if err != nil {
		n.stopLeases()
		return nil, err
	}
	n.setRegistration(reg)
	go n.loop()
	return n, nil
}

// Incarnation names the node's current run: a new one after every lost
// lease.
func (n *Node) Incarnation() string { return n.current().incarnation }

// LeaseID is the etcd lease the node's liveness key is bound to (0 while
// it registers again).
func (n *Node) LeaseID() int64 { return int64(n.current().lease) }

// do runs fn on the loop goroutine; false if the node stopped.
func (n *Node) do(fn func()) bool {
	select {
	case n.work <- fn:
		return true
	case <-n.stop:
		return false
	}
}

// async runs fn on its own goroutine, tracked so Close waits for it.
func (n *Node) async(fn func()) {
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		fn()
	}()
}

// Close stops the node: its loop, its open ledger (closed at its LAC) and
// its lease (so the sequencer ends its session at once).
func (n *Node) Close() {
	select {
	case <-n.stop:
		return
	default:
	}
	close(n.stop)
	<-n.done
	n.wg.Wait()
	reg := n.reg // the loop has stopped: nothing writes it any more
	for _, id := range n.writerIDs() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if _, err := n.writers[id].Close(ctx); err == nil {
			reg.grants.LedgerClosed(id)
		}
		cancel()
	}
	reg.grants.Close()
	if reg.lease != 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, _ = n.etcd.Revoke(ctx, reg.lease)
		cancel()
	}
	n.stopLeases()
}

func (n *Node) loop() {
	defer close(n.done)
	health := time.NewTicker(20 * time.Millisecond)
	defer health.Stop()
	ensemble := time.NewTicker(ensembleCheckEvery)
	defer ensemble.Stop()
	for {
		select {
		case fn := <-n.work:
			fn()
		case reply := <-n.reg.grants.Replies():
			n.onGrantReply(reply)
		case now := <-health.C:
			n.machine.Tick(now)
			n.principals.sweep(n.machine.Producers(), n.machine.HoldsProducer)
			n.checkWriter()
			n.checkRoll(now)
		case <-ensemble.C:
			n.checkEnsemble()
		case <-n.stop:
			return
		}
		n.drive()
	}
}

// drive acts on the machine's outputs until it has nothing more to say.
func (n *Node) drive() {
	for {
		ready := n.machine.Ready()
		if ready.Empty() {
			return
		}
		n.act(&ready)
	}
}

// act carries out one Ready, in its field order.
func (n *Node) act(ready *coordinator.Ready) {
	for _, g := range ready.GrantRequests {
		n.grantAsked[g.BatchID] = time.Now()
		n.reg.grants.Grant(g.BatchID, g.Ledger, g.Count)
	}
	n.appendEntries(ready.Appends)
	for _, id := range ready.LedgersClosed {
		n.reg.grants.LedgerClosed(id)
	}
	for _, w := range ready.Written {
		n.reg.grants.Written(w.Ledger, w.Entry, w.Span)
	}
	for _, u := range ready.Unused {
		n.reg.grants.Unused(u.Ledger, u.Span)
	}
	for _, b := range ready.Logged {
		n.observeLogged(b)
	}
	for _, f := range ready.Answers {
		frameOf(f).answer(f.Response())
	}
	for _, f := range ready.Releases {
		frameOf(f).releaseBuffer()
	}
	if ready.OpenLedger != nil {
		n.openLedger(ready.OpenLedger)
	}
	n.closeLedgers(ready.CloseLedgers)
	incarnation := n.reg.incarnation
	for _, t := range ready.Takeovers {
		n.async(func() { n.takeover(t, incarnation) })
	}
	for _, r := range ready.RecordStates {
		n.async(func() { n.recordState(r, incarnation) })
	}
	for _, index := range ready.RegisterBuckets {
		n.async(func() { n.registerBucket(index, incarnation) })
	}
	for _, done := range ready.InitsDone {
		n.answerInit(done)
	}
	for _, done := range ready.ProducersReleased {
		n.answerRelease(done)
	}
	for _, a := range ready.AdvanceStates {
		n.async(func() { n.advanceStates(a, incarnation) })
	}
	for _, p := range ready.ExpireProducers {
		n.async(func() { n.expireProducer(p, incarnation) })
	}
}

// observeLogged counts a durable batch in the metrics.
func (n *Node) observeLogged(b *pipeline.Batch) {
	now := time.Now()
	if !b.AppendedAt.IsZero() {
		n.metrics.confirmLatency.Observe(now.Sub(b.AppendedAt).Seconds())
	}
	for _, m := range b.Messages {
		frameOf(m.Payload.(*coordinator.MessageRef).Frame).times.confirmed = now
	}
	n.metrics.loggedMessages.Add(float64(len(b.Messages)))
}

// Producers is the number of producers this node owns or is taking over.
func (n *Node) Producers() int {
	count := make(chan int, 1)
	if !n.do(func() { count <- n.machine.Producers() }) {
		return 0
	}
	select {
	case c := <-count:
		return c
	case <-n.done: // stopped before it ran
		return 0
	}
}
