package coordinator

import (
	"slices"
	"time"

	"orderlog/ingest/pipeline"
	"orderlog/ingest/producer"
	"orderlog/proto/orderlogpb"
)

// Config configures the machine.
type Config struct {
	// DedupWindow is how many (seq → offset) pairs each producer remembers.
	DedupWindow int
	// Pipeline bounds batches.
	Pipeline pipeline.Config
	// ProducerExpiry: a ready producer idle for longer is dropped at the
	// next roll (its record marked expired); 0 never expires one.
	ProducerExpiry time.Duration
}

// Machine is the ingest node's coordination state. Not safe for concurrent
// use: one goroutine feeds it inputs and takes its Ready.
type Machine struct {
	cfg        Config
	table      *producer.Table
	pipe       *pipeline.Pipeline
	ledger     openLedger
	producers  map[uint64]*session
	dupWaiters map[seqKey][]ackTarget
	buckets    [IdempotencyBuckets]*keyBucket
	bucketOf   map[uint64]*keyBucket // by the bucket's producer id
	inits      []*pendingInit        // in arrival order
	sessions   uint64                // sessions started: the last one's number
	releases   []pendingRelease      // in arrival order
	// refusedInARow counts grant refusals since the last grant: each one
	// closes the ledger, and the next is opened only after a pause that
	// grows with it (RefusalPause).
	refusedInARow int
	// now is the time of the last Tick: producers' idleness is measured
	// against it.
	now   time.Time
	ready Ready
}

// openLedger is the ledger appends go to.
type openLedger struct {
	id        uint64 // 0: none open
	nextEntry int64  // the entry number of the next append
	// lastClosed is the ledger closed last (0: none yet), for OpenLedger's
	// reason.
	lastClosed uint64
	// inEntry0 are the producers whose state the pending OpenLedger's
	// snapshot (the next ledger's entry 0) holds.
	inEntry0 map[uint64]bool
	// next is a roll's ledger, open and waiting for the switch (0: none);
	// nextLAC its LAC so far (-1: none reported).
	next    uint64
	nextLAC int64
	// rollReason says why the pending roll was asked, for OpenLedger.
	rollReason string
	// advance is the last switch's snapshot, until it is confirmed.
	advance *pendingAdvance
}

// seqKey names one message of one producer.
type seqKey struct{ producer, seq uint64 }

// ackTarget is a message of a frame waiting for an offset.
type ackTarget struct {
	frame *Frame
	index int
}

// New returns a machine with no ledger and no producers.
func New(cfg Config) (*Machine, error) {
	pipe, err := pipeline.New(cfg.Pipeline)
	if err != nil {
		return nil, err
	}
	return &Machine{cfg: cfg, table: producer.NewTable(cfg.DedupWindow), pipe: pipe,
		producers: make(map[uint64]*session), dupWaiters: make(map[seqKey][]ackTarget),
		bucketOf: make(map[uint64]*keyBucket), ledger: openLedger{nextLAC: -1}}, nil
}

// Ready is what the owner must do next, in field order.
type Ready struct {
	// GrantRequests go to the sequencer, in order.
	GrantRequests []pipeline.GrantRequest
	// Appends go to the open ledger, in order: Appends[i] must become entry
	// Appends[i].Entry. If an append fails, the owner skips the rest of that
	// ledger's appends and reports LedgerFailed.
	Appends []Append
	// Written and Unused go to the sequencer; LedgersClosed tells it which
	// ledgers this node closed.
	Written       []pipeline.WrittenReport
	Unused        []pipeline.UnusedReport
	LedgersClosed []uint64
	// Acked (ack mode leader) and Logged are for the owner's metrics: their
	// frames' acks are already recorded.
	Acked  []*pipeline.Batch
	Logged []*pipeline.Batch
	// Answers are frames whose Response is final: send it. Releases are
	// frames none of whose messages the machine needs any more.
	Answers  []*Frame
	Releases []*Frame
	// OpenLedger asks for a new ledger whose entry 0 is the snapshot; report
	// LedgerOpened or LedgerOpenFailed. It comes after Logged because the
	// snapshot must count what was logged (a rebuild from it would forget
	// acknowledged seqs otherwise).
	OpenLedger *OpenLedger
	// CloseLedgers are ledgers to close at their LAC (the writer freezes its
	// LAC before the close); report LedgerClosed with the last entry.
	CloseLedgers []uint64
	// Takeovers: make this node the producer's owner at Epoch and rebuild
	// its state from the ledgers; report TakeoverDone.
	Takeovers []Takeover
	// RecordStates: record Ledger as the producer's state ledger in etcd,
	// if this node still owns it; report StateRecorded.
	RecordStates []StateRecord
	// RegisterBuckets: register the idempotency bucket's producer name
	// (InitProducer in etcd); report BucketRegistered or
	// BucketRegistrationFailed.
	RegisterBuckets []int
	// InitsDone answer InitProducer calls.
	InitsDone []InitDone
	// ProducersReleased answer ReleaseProducer calls.
	ProducersReleased []ProducerReleased
	// AdvanceStates: move the named producers' state ledger forward (after
	// a roll); nothing is reported back.
	AdvanceStates []StateAdvance
	// ExpireProducers: mark these producer records expired in etcd, if
	// still at the ownership generation; report ProducerExpired.
	ExpireProducers []OwnedProducer
}

// Append is one ledger entry to write: a batch, or a snapshot of producer
// states (Batch nil).
type Append struct {
	Ledger   uint64
	Entry    int64
	Batch    *pipeline.Batch
	Snapshot []producer.State
}

// OpenLedger asks for a ledger whose entry 0 holds Snapshot, after Pause
// (grants refused in a row: see RefusalPause).
type OpenLedger struct {
	Snapshot []producer.State
	Pause    time.Duration
	Reason   string // why a ledger is needed, for the log
	// Roll: the open ledger goes on meanwhile (a roll, not a replacement).
	Roll bool
}

// Takeover asks for producer Producer to be taken over at Epoch. Session
// names the session that asks; its TakeoverResult carries it back (a
// session given up meanwhile, by a release, must not take the outcome of
// its takeover for a later session's).
type Takeover struct{ Producer, Epoch, Session uint64 }

// StateRecord asks for Ledger to be recorded as Producer's state ledger,
// for session Session (StateRecorded names it), if the producer record is
// still at ownership generation OwnerGen: a record this node's earlier
// session asked for must not land after the producer left and came back.
type StateRecord struct{ Producer, Ledger, Session, OwnerGen uint64 }

// InitDone answers the InitProducer call Token.
type InitDone struct {
	Token    uint64
	Response *orderlogpb.InitProducerResponse
	Err      error
}

// Empty reports whether there is nothing to do.
func (r *Ready) Empty() bool {
	return len(r.GrantRequests) == 0 && len(r.Appends) == 0 && len(r.Written) == 0 && len(r.Unused) == 0 &&
		len(r.LedgersClosed) == 0 && len(r.Acked) == 0 && len(r.Logged) == 0 && len(r.Answers) == 0 &&
		len(r.Releases) == 0 && r.OpenLedger == nil && len(r.CloseLedgers) == 0 && len(r.Takeovers) == 0 &&
		len(r.RecordStates) == 0 && len(r.RegisterBuckets) == 0 && len(r.InitsDone) == 0 && len(r.ProducersReleased) == 0 &&
		len(r.AdvanceStates) == 0 && len(r.ExpireProducers) == 0
}

// Ready drives the pipeline until it has nothing more to say and returns
// (and forgets) the pending outputs.
func (m *Machine) Ready() Ready {
	for {
		m.answerInits() // a bucket's answer queues its held frames
		m.answerReleases()
		out := m.pipe.Ready()
		if out.Empty() {
			break
		}
		m.ready.GrantRequests = append(m.ready.GrantRequests, out.GrantRequests...)
		m.queueAppends(out.Appends)
		m.ready.Written = append(m.ready.Written, out.Written...)
		m.ready.Unused = append(m.ready.Unused, out.Unused...)
		for _, b := range out.Acked {
			m.ackEarly(b)
		}
		for _, b := range out.Logged {
			m.logged(b)
		}
		m.ready.Acked = append(m.ready.Acked, out.Acked...)
		m.ready.Logged = append(m.ready.Logged, out.Logged...)
		if out.Switched != nil {
			m.switched(out.Switched) // after Logged: its snapshot counts them
		}
		if out.NeedLedger {
			m.askForLedger() // after Logged: its snapshot must count them durable
		}
	}
	out := m.ready
	m.ready = Ready{}
	return out
}

// queueAppends numbers granted batches as the open ledger's next entries.
// A batch of another ledger (one being closed) is skipped: its grant is
// reported Unused when that ledger has closed.
func (m *Machine) queueAppends(batches []*pipeline.Batch) {
	for _, b := range batches {
		if m.ledger.id == 0 || m.ledger.id != b.Ledger {
			continue
		}
		entry := m.appendEntry(Append{Batch: b})
		if err := m.pipe.Appended(b.ID, entry); err != nil {
			panic("coordinator: " + err.Error()) // the pipeline handed it out: a bug
		}
	}
}

// appendEntry queues a as the open ledger's next entry and returns its
// number.
func (m *Machine) appendEntry(a Append) int64 {
	a.Ledger, a.Entry = m.ledger.id, m.ledger.nextEntry
	m.ledger.nextEntry++
	m.ready.Appends = append(m.ready.Appends, a)
	return a.Entry
}

// Producers is the number of producers this node owns or is taking over.
func (m *Machine) Producers() int { return len(m.producers) }

// HoldsProducer reports whether this node owns the producer or is taking
// it over.
func (m *Machine) HoldsProducer(id uint64) bool {
	_, ok := m.producers[id]
	return ok
}

// ProducerIdle reports whether this node owns the producer or is taking
// it over, and for how long by the machine's clock (Tick) its session has
// neither started nor had a frame.
func (m *Machine) ProducerIdle(id uint64) (idle time.Duration, held bool) {
	s, ok := m.producers[id]
	if !ok {
		return 0, false
	}
	if m.now.IsZero() || s.lastActive.IsZero() {
		return 0, true
	}
	return max(0, m.now.Sub(s.lastActive)), true
}

// Ledger is the open ledger (0 if none).
func (m *Machine) Ledger() uint64 { return m.ledger.id }

// ProducerState is a producer's durable state in the table, if present.
func (m *Machine) ProducerState(id uint64) (producer.State, bool) { return m.table.Get(id) }

// Waiting is the number of accepted messages not yet sealed into a batch.
func (m *Machine) Waiting() int { return m.pipe.Waiting() }

// sortedIDs returns the keys of a producer map in increasing order, so the
// machine's outputs do not depend on map order.
func sortedIDs[V any](producers map[uint64]V, keep func(V) bool) []uint64 {
	var ids []uint64
	for id, v := range producers {
		if keep(v) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}
