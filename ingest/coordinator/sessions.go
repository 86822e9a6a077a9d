package coordinator

import (
	"time"

	"orderlog/ingest/producer"
	"orderlog/internal/apierr"
	"orderlog/proto/orderlogpb"
)

// snapshotInNextLedger marks a producer whose state snapshot will be entry
// 0 of the next ledger this node opens.
const snapshotInNextLedger = -1

// session is a producer this node owns or is taking over.
//
// Invariant: frames of a producer are processed only once ready, which is
// after its state was rebuilt, a snapshot of that state was confirmed in one
// of this node's ledgers, and that ledger was recorded in the producer's
// etcd record — so the next owner rebuilds from a state that includes every
// message this node logs for it.
type session struct {
	// gen numbers the session among all of this machine's: operations it
	// started answer with it, and an answer for an older session of the
	// same producer is ignored.
	gen uint64
	// ownerGen is the producer record's ownership generation the takeover
	// left it at (TakeoverResult.OwnerGen).
	ownerGen uint64
	// epoch is the highest epoch InitProducer gave the producer while the
	// session was settling; settle fences the table at it.
	epoch          uint64
	settled        bool     // state rebuilt and in the table
	keyed          bool     // an idempotency-key bucket
	keys           []string // its rebuilt keys, aligned with the window
	digests        []uint64 // their request digests (or none)
	ready          bool
	held           []*Frame
	snapshotLedger uint64
	snapshotEntry  int64
	recording      bool
	// releasing: the next owner asked for the producer (ReleaseProducer);
	// its frames are refused until it is handed over.
	releasing bool
	// lastActive is the machine's time (Tick) when the session started or
	// last had a frame; expiring: idle past the expiry, its record being
	// marked expired (frames wait meanwhile).
	lastActive time.Time
	expiring   bool
}

// pendingInit is an InitProducer waiting for its producer's session to be
// ready and the older instance's in-flight messages to be logged, so the
// new instance continues right after them.
type pendingInit struct {
	token    uint64 // the caller's; unused for a bucket
	producer uint64
	epoch    uint64
	bucket   int // the idempotency bucket registering, or -1
}

// InitProducer: etcd made this node the owner of producer id at epoch (an
// InitProducer call, token names it). The session is fenced at the new
// epoch, or taken over; InitsDone answers token once it is ready.
func (m *Machine) InitProducer(id, epoch, token uint64) {
	m.initSession(id, epoch, false)
	m.inits = append(m.inits, &pendingInit{token: token, producer: id, epoch: epoch, bucket: -1})
}

func (m *Machine) initSession(id, epoch uint64, keyed bool) {
	if s, ok := m.producers[id]; ok {
		s.epoch = max(s.epoch, epoch)
		m.table.Fence(id, epoch)
		return
	}
	s := m.session(id, epoch)
	s.keyed = keyed
}

// session returns the producer's session, starting a takeover at epoch if
// the node does not own the producer yet.
func (m *Machine) session(id, epoch uint64) *session {
	s, ok := m.producers[id]
	if !ok {
		m.sessions++
		s = &session{gen: m.sessions, epoch: epoch, snapshotEntry: snapshotInNextLedger, lastActive: m.now}
		m.producers[id] = s
		m.ready.Takeovers = append(m.ready.Takeovers, Takeover{Producer: id, Epoch: epoch, Session: s.gen})
	}
	return s
}

// TakeoverResult is the outcome of a Takeover: the producer's epoch as
// etcd holds it (Current), its state rebuilt from the ledgers, or an API
// error (PRODUCER_FENCED, UNKNOWN_PRODUCER, UNAVAILABLE…).
type TakeoverResult struct {
	Producer, Epoch, Session uint64 // as asked
	Current                  uint64
	// OwnerGen is the record's ownership generation with this node the
	// owner: its state records compare it.
	OwnerGen uint64
	State    producer.State
	Err      error
}

// SessionWaits reports whether session is producer id's current session
// and still waits for its takeover (for a driver that retries one).
func (m *Machine) SessionWaits(id, session uint64) bool {
	s, ok := m.producers[id]
	return ok && s.gen == session && !s.settled
}

// TakeoverDone: a Takeover finished.
func (m *Machine) TakeoverDone(r TakeoverResult) {
	s, ok := m.producers[r.Producer]
	if !ok || s.gen != r.Session || s.settled {
		return // the session that asked was given up
	}
	if r.Err != nil && s.epoch > r.Epoch && s.epoch >= r.Current {
		// An InitProducer raised the epoch while this takeover ran for an
		// older instance's frame: take over at the new epoch. The held
		// frames are judged against it once the state is settled (the older
		// instance's are fenced then), and the new instance is not told it
		// is fenced.
		m.ready.Takeovers = append(m.ready.Takeovers, Takeover{Producer: r.Producer, Epoch: s.epoch, Session: s.gen})
		return
	}
	if r.Err != nil {
		m.dropSession(r.Producer, r.Err)
		return
	}
	s.ownerGen = r.OwnerGen
	m.settle(r.Producer, s, r.State)
}

// settle installs a rebuilt state and makes it durable in this node's own
// ledger.
func (m *Machine) settle(id uint64, s *session, state producer.State) {
	state.Epoch = max(state.Epoch, s.epoch)
	m.table.Register(state)
	// A snapshot taken for the next ledger's entry 0 before now holds an
	// older state of it, if any (the producer was released and came back):
	// it gets an entry of its own.
	delete(m.ledger.inEntry0, id)
	s.settled = true
	if s.keyed {
		s.keys, s.digests = state.Keys, state.Digests
	}
	m.writeSnapshot(id, s)
}

// writeSnapshot appends a one-producer snapshot entry to the open ledger,
// or, without one, leaves the snapshot to entry 0 of the next ledger.
func (m *Machine) writeSnapshot(id uint64, s *session) {
	if m.ledger.id == 0 {
		s.snapshotLedger, s.snapshotEntry = 0, snapshotInNextLedger
		m.pipe.WantLedger()
		return
	}
	state, _ := m.table.Get(id)
	s.snapshotLedger = m.ledger.id
	s.snapshotEntry = m.appendEntry(Append{Snapshot: m.withKeys([]producer.State{state})})
}

// snapshotsDurable asks, for every producer whose snapshot entry in ledger
// is now durable (≤ through), for that ledger to be recorded as its state
// ledger.
func (m *Machine) snapshotsDurable(ledger uint64, through int64) {
	for _, id := range sortedIDs(m.producers, func(s *session) bool {
		return s.settled && !s.ready && !s.recording && !s.expiring && s.snapshotLedger == ledger && s.snapshotEntry >= 0 && s.snapshotEntry <= through
	}) {
		m.producers[id].recording = true
		m.ready.RecordStates = append(m.ready.RecordStates, StateRecord{Producer: id, Ledger: ledger,
			Session: m.producers[id].gen, OwnerGen: m.producers[id].ownerGen})
	}
}

// StateRecorded: session's RecordStates write finished; err is an API
// error (UNAVAILABLE if the producer moved to another node meanwhile).
func (m *Machine) StateRecorded(id, session uint64, err error) {
	s, ok := m.producers[id]
	if !ok || s.gen != session || !s.recording {
		return // the session that asked was given up
	}
	s.recording = false
	if err != nil {
		m.dropSession(id, err)
		return
	}
	s.ready = true
	held := s.held
	s.held = nil
	for _, f := range held {
		m.produceOwned(f)
	}
}

// dropSession forgets a producer, refusing what waited for it.
func (m *Machine) dropSession(id uint64, err error) {
	s, ok := m.producers[id]
	if !ok {
		return
	}
	delete(m.producers, id)
	m.table.Remove(id)
	delete(m.ledger.inEntry0, id)
	for _, f := range s.held {
		m.refuse(f, err)
	}
	kept := m.inits[:0]
	for _, p := range m.inits {
		if p.producer != id {
			kept = append(kept, p)
			continue
		}
		m.initDone(p, nil, err)
	}
	clear(m.inits[len(kept):])
	m.inits = kept
}

// answerInits answers the InitProducer calls whose producer is ready and
// has nothing in flight.
func (m *Machine) answerInits() {
	if len(m.inits) == 0 {
		return
	}
	kept := m.inits[:0]
	for _, p := range m.inits {
		s, ok := m.producers[p.producer]
		if !ok || !s.ready || s.releasing || m.table.InFlight(p.producer) > 0 { // a release answers it with its refusal
			kept = append(kept, p)
			continue
		}
		state, _ := m.table.Get(p.producer)
		resp := &orderlogpb.InitProducerResponse{ProducerId: p.producer, Epoch: p.epoch, NextSeq: state.DurableNext}
		if state.DurableNext > 0 {
			if verdict, offset := m.table.Lookup(p.producer, state.DurableNext-1); verdict == producer.Duplicate {
				resp.LastOffset = &offset
			}
		}
		m.initDone(p, resp, nil)
	}
	clear(m.inits[len(kept):])
	m.inits = kept
}

func (m *Machine) initDone(p *pendingInit, resp *orderlogpb.InitProducerResponse, err error) {
	if p.bucket >= 0 {
		m.bucketRegistered(m.bucket(p.bucket), resp, err)
		return
	}
	m.ready.InitsDone = append(m.ready.InitsDone, InitDone{Token: p.token, Response: resp, Err: err})
}

// staleEpochError is the refusal of a frame whose epoch is not the
// producer's current one.
func StaleEpochError(id, asked, current uint64) error {
	if asked < current {
		return apierr.New(apierr.ProducerFenced, "producer %d epoch %d is fenced by epoch %d", id, asked, current)
	}
	return apierr.New(apierr.UnknownProducer, "producer %d has no epoch %d (current %d): call InitProducer", id, asked, current)
}
