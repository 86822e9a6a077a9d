package coordinator

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"orderlog/ingest/batch"
	"orderlog/ingest/pipeline"
	"orderlog/ingest/producer"
	"orderlog/internal/apierr"
	"orderlog/proto/orderlogpb"
)

// The simulation runs two ingest nodes (Machines) against simulated
// ledgers, a simulated sequencer and simulated etcd records in one
// deterministic world driven by a seeded random schedule. Entries hold real
// batch payloads, so a takeover rebuilds a producer's state with the real
// StateBuilder. Producers (idempotent clients, pipelining up to three
// frames, retrying old frames) and one Idempotency-Key client send frames;
// the schedule interleaves grants, refusals, confirmations, append and
// ledger failures, closes, takeovers, etcd answers and node crashes with
// restarts. After every step the world checks: every acknowledged
// (producer, seq) has exactly one offset and was durable when acknowledged,
// a retry gets the original offset, no offset and no (producer, seq) is
// logged twice, each producer's seqs become durable in order without a gap.
//
// A producer moves to another node when its node crashed, or while its
// owner lives (a client that moved, InitProducer elsewhere): the new owner
// asks the live owner to release it (DESIGN.md §6) and, when that fails or
// takes too long, revokes the owner's lease and rebuilds from the ledgers.

// simWorld is the whole simulated system.
type simWorld struct {
	t      testing.TB
	seed   uint64
	rng    *rand.Rand
	trace  []string
	step   int
	nodes  [2]*simNode
	ledger struct {
		all  map[uint64]*simLedger
		next uint64
	}
	etcd struct {
		producers map[uint64]*simProducerRecord
		byName    map[string]uint64
		nextID    uint64
	}
	nextOffset uint64
	tokens     uint64 // InitProducer tokens handed out
	// releases are the takeovers waiting for their previous owner's
	// ReleaseProducer answer, by token.
	releases map[uint64]*simRelease
	// revoked are the incarnations whose etcd lease is gone: they can
	// create no ledger and their grant sessions are dead.
	revoked map[string]bool
	clients []*simClient
	keyed   *simKeyedClient
	check   simChecker
	stats   simStats
	// brokenRecovery makes recoveries lose the last confirmed entry: a
	// storage bug the checker must catch, for the replay test.
	brokenRecovery bool
}

type simStats struct {
	acked, refusals, crashes, takeovers, closes, appendFailures, leaseLosses, moves, released, rolls, advances uint64
}

// simRelease is a takeover waiting for the previous owner to release the
// producer.
type simRelease struct {
	to   *simNode
	inc  string // to's incarnation that takes the producer over
	from string // the previous owner's incarnation
	t    Takeover
	rec  *simProducerRecord
	gen  uint64 // the record's ownership generation after the takeover's CAS
	// epoch is the record's epoch as the takeover read it: an InitProducer
	// at the previous owner may raise it before the release.
	epoch uint64
}

// simLedger is a ledger in miniature (DESIGN.md §4): its writer appends
// entries, confirms them in order (lac), closes at its LAC; a recovery
// keeps the LAC plus a random part of the unconfirmed entries.
type simLedger struct {
	id      uint64
	writer  string
	entries []simEntry
	// sent are the offset spans of every batch ever appended, kept when a
	// close drops entries: an Unused report must not overlap one.
	sent    []pipeline.Span
	lac     int64
	closed  bool
	last    int64
	durable int64 // entries ≤ durable were handed to the checker
}

// simEntry is one entry: its payload and, for the checker, its messages.
type simEntry struct {
	payload    []byte
	first      uint64
	msgs       []simMsg
	snapshotOf []uint64 // producers whose state a snapshot entry holds
}

type simMsg struct {
	producer, seq uint64
	key           string
	value         string
}

// durableThrough is the last entry that can never be lost.
func (l *simLedger) durableThrough() int64 {
	if l.closed {
		return l.last
	}
	return l.lac
}

type simProducerRecord struct {
	id, epoch   uint64
	gen         uint64 // ownership generation: bumped by every owner change
	name, owner string
	stateLedger uint64
}

// simNode is one ingest node: a machine and what its driver holds.
type simNode struct {
	slot        int
	incarnation string
	generation  int
	m           *Machine
	alive       bool
	writers     map[uint64]bool // the ledgers the driver has open: the machine's, and a roll's next
	inbox       []*Frame        // sent by clients, not yet taken up: a stream, in order
	grants      []pipeline.GrantRequest
	pending     []simEvent // answers of slow operations, delivered in any order
	opening     bool
	encoder     Encoder
	released    map[*Frame]bool
}

// simEvent is a slow operation's answer waiting to be delivered.
type simEvent struct {
	name        string
	incarnation string
	fn          func(current bool)
}

func newSimWorld(t testing.TB, seed uint64) *simWorld {
	w := &simWorld{t: t, seed: seed, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	w.ledger.all = make(map[uint64]*simLedger)
	w.revoked = make(map[string]bool)
	w.releases = make(map[uint64]*simRelease)
	w.etcd.producers = make(map[uint64]*simProducerRecord)
	w.etcd.byName = make(map[string]uint64)
	w.check = newSimChecker(w)
	for i := range w.nodes {
		w.nodes[i] = &simNode{slot: i}
		w.startNode(w.nodes[i])
	}
	for i := range 3 {
		w.clients = append(w.clients, &simClient{name: fmt.Sprintf("p%d", i), node: i % 2, sent: make(map[uint64]string)})
	}
	w.keyed = &simKeyedClient{node: 0}
	return w
}

func (w *simWorld) fatalf(format string, args ...any) {
	w.t.Helper()
	tail := w.trace[max(0, len(w.trace)-30):]
	w.t.Fatalf("seed %d step %d: %s\nlast steps:\n  %s\nreplay: go test ./ingest/coordinator -run TestSimulation -sim.seed=%d -v",
		w.seed, w.step, fmt.Sprintf(format, args...), strings.Join(tail, "\n  "), w.seed)
}

func (w *simWorld) logf(format string, args ...any) {
	w.trace = append(w.trace, fmt.Sprintf("%d: ", w.step)+fmt.Sprintf(format, args...))
}

// startNode gives a node slot a new incarnation with an empty machine.
func (w *simWorld) startNode(n *simNode) {
	n.generation++
	n.incarnation = fmt.Sprintf("n%d.%d", n.slot, n.generation)
	m, err := New(Config{DedupWindow: 8, Pipeline: pipeline.Config{MaxBatchMessages: 4, MaxInFlight: 3}})
	if err != nil {
		w.t.Fatal(err)
	}
	n.m, n.alive, n.writers, n.opening = m, true, make(map[uint64]bool), false
	w.revoked[n.incarnation] = false
	n.inbox, n.grants, n.pending = nil, nil, nil
	n.released = make(map[*Frame]bool)
	w.logf("%s starts", n.incarnation)
}

// crash kills a node: its machine and everything in flight to it are gone;
// its ledgers stay as they are until someone recovers them.
func (w *simWorld) crash(n *simNode) {
	w.logf("%s crashes", n.incarnation)
	w.revoked[n.incarnation] = true // its lease expires
	w.stats.crashes++
	n.alive = false
	w.failReleasesFrom(n)
	for _, c := range w.clients {
		if c.node == n.slot {
			c.lost(w)
		}
	}
	if w.keyed.node == n.slot {
		w.keyed.lost()
	}
}

// later queues a slow operation of node n's current incarnation. When it
// runs, current says whether that incarnation is still the node's: the
// driver hands the machine only the outcomes of its current incarnation's
// operations (a lost lease gave up everything the older one started).
func (w *simWorld) later(n *simNode, name string, fn func(current bool)) {
	n.pending = append(n.pending, simEvent{name: name, incarnation: n.incarnation, fn: fn})
}

// drive acts on every live node's Ready until all are quiet.
func (w *simWorld) drive() {
	for busy := true; busy; {
		busy = false
		for _, n := range w.nodes {
			if !n.alive {
				continue
			}
			rd := n.m.Ready()
			if rd.Empty() {
				continue
			}
			busy = true
			w.act(n, &rd)
		}
	}
}

// act is the simulated driver: what the ingest node does with a Ready.
func (w *simWorld) act(n *simNode, rd *Ready) {
	n.grants = append(n.grants, rd.GrantRequests...)
	w.appendEntries(n, rd.Appends)
	for _, r := range rd.Written {
		w.check.written(r)
	}
	for _, u := range rd.Unused {
		w.check.unused(u)
	}
	for _, f := range rd.Answers {
		w.answered(n, f)
	}
	for _, f := range rd.Releases {
		if n.released[f] || f.Response() == nil {
			w.fatalf("frame released twice or before its answer")
		}
		n.released[f] = true
	}
	if rd.OpenLedger != nil {
		w.openLedger(n, rd.OpenLedger)
	}
	for _, id := range rd.CloseLedgers {
		w.closeLedger(n, id)
	}
	for _, t := range rd.Takeovers {
		inc := n.incarnation
		w.later(n, fmt.Sprintf("takeover p%d@%d", t.Producer, t.Epoch), func(current bool) {
			if r, waiting := w.takeover(n, inc, t); current && !waiting {
				n.m.TakeoverDone(r)
			}
		})
	}
	for _, r := range rd.ProducersReleased {
		w.released(r)
	}
	for _, r := range rd.RecordStates {
		inc := n.incarnation
		w.later(n, fmt.Sprintf("record p%d in L%d", r.Producer, r.Ledger), func(current bool) {
			if err := w.recordState(inc, r); current {
				n.m.StateRecorded(r.Producer, r.Session, err)
			}
		})
	}
	for _, index := range rd.RegisterBuckets {
		inc := n.incarnation
		w.later(n, fmt.Sprintf("register bucket %d", index), func(current bool) {
			if w.rng.IntN(10) == 0 {
				if current {
					n.m.BucketRegistrationFailed(index, apierr.New(apierr.Unavailable, "etcd is unavailable"))
				}
				return
			}
			rec, err := w.register(BucketName(index), inc)
			switch {
			case !current:
			case err != nil:
				n.m.BucketRegistrationFailed(index, err)
			default:
				n.m.BucketRegistered(index, rec.id, rec.epoch)
			}
		})
	}
	for _, done := range rd.InitsDone {
		w.initDone(n, done)
	}
	for _, a := range rd.AdvanceStates {
		inc := n.incarnation
		w.later(n, fmt.Sprintf("advance %d producers to L%d", len(a.Producers), a.Ledger), func(bool) {
			w.advanceStates(inc, a)
		})
	}
}

// anyWriter is one of the node's open ledgers, at random.
func (w *simWorld) anyWriter(n *simNode) (uint64, bool) {
	ids := sortedIDs(n.writers, func(bool) bool { return true })
	if len(ids) == 0 {
		return 0, false
	}
	return ids[w.rng.IntN(len(ids))], true
}

// advanceStates moves the named producers' state ledger, each one whose
// record is still the session's, as the batched compare-and-swap does; a
// failed etcd write leaves them all where they were.
func (w *simWorld) advanceStates(incarnation string, a StateAdvance) {
	if w.revoked[incarnation] || w.rng.IntN(10) == 0 {
		w.logf("etcd fails to move state ledgers to L%d", a.Ledger)
		return
	}
	for _, p := range a.Producers {
		w.check.snapshotDurable(StateRecord{Producer: p.Producer, Ledger: a.Ledger})
		if rec := w.etcd.producers[p.Producer]; rec.owner == incarnation && rec.gen == p.OwnerGen {
			rec.stateLedger = a.Ledger
			w.stats.advances++
		}
	}
}

// appendEntries writes entries to the node's open ledger; an append may
// fail, which fails the ledger as a real writer would.
func (w *simWorld) appendEntries(n *simNode, appends []Append) {
	for _, a := range appends {
		if !n.writers[a.Ledger] {
			continue
		}
		l := w.ledger.all[a.Ledger]
		if l.closed || w.rng.IntN(100) == 0 {
			w.logf("%s: append to L%d fails", n.incarnation, a.Ledger)
			w.stats.appendFailures++
			delete(n.writers, a.Ledger) // a failed writer takes no more appends
			n.m.LedgerFailed(a.Ledger)
			continue
		}
		if int64(len(l.entries)) != a.Entry {
			w.fatalf("append numbered entry %d of L%d, which has %d", a.Entry, a.Ledger, len(l.entries))
		}
		l.entries = append(l.entries, w.entryOf(n, a))
		if a.Batch != nil {
			l.sent = append(l.sent, a.Batch.Span())
		}
	}
}

func (w *simWorld) entryOf(n *simNode, a Append) simEntry {
	if a.Batch == nil {
		payload, err := batch.EncodeSnapshot(nil, 0, a.Snapshot)
		if err != nil {
			w.fatalf("snapshot: %v", err)
		}
		return simEntry{payload: payload, snapshotOf: stateIDs(a.Snapshot)}
	}
	payload, err := n.encoder.Encode(a.Batch, 0, nil)
	if err != nil {
		w.fatalf("encode: %v", err)
	}
	e := simEntry{payload: payload, first: a.Batch.First}
	for _, m := range a.Batch.Messages {
		record := m.Payload.(*MessageRef).Record
		e.msgs = append(e.msgs, simMsg{producer: m.ProducerID, seq: m.Seq, key: string(record.MessageID), value: string(record.Value)})
	}
	return e
}

// openLedger creates the ledger later (or fails to), its entry 0 the
// machine's snapshot.
func (w *simWorld) openLedger(n *simNode, open *OpenLedger) {
	inc := n.incarnation
	w.later(n, "open ledger", func(current bool) {
		if w.revoked[inc] || w.rng.IntN(10) == 0 { // no ledger without a live liveness key
			w.logf("%s: ledger creation fails", inc)
			if current {
				n.m.LedgerOpenFailed()
			}
			return
		}
		payload, err := batch.EncodeSnapshot(nil, 0, open.Snapshot)
		if err != nil {
			w.fatalf("snapshot: %v", err)
		}
		w.ledger.next++
		l := &simLedger{id: w.ledger.next, writer: inc, lac: -1, durable: -1,
			entries: []simEntry{{payload: payload, snapshotOf: stateIDs(open.Snapshot)}}}
		if w.rng.IntN(2) == 0 {
			l.lac = 0
		}
		w.ledger.all[l.id] = l
		if !current { // the driver closes a ledger its old incarnation opened
			w.seal(l, l.lac)
			return
		}
		n.writers[l.id] = true
		w.logf("%s opens L%d (lac %d, snapshot of %d)", inc, l.id, l.lac, len(open.Snapshot))
		n.m.LedgerOpened(l.id, l.lac)
	})
}

// closeLedger closes the node's ledger later, at its LAC then.
func (w *simWorld) closeLedger(n *simNode, id uint64) {
	delete(n.writers, id)
	w.later(n, fmt.Sprintf("close L%d", id), func(current bool) {
		l := w.ledger.all[id]
		if !l.closed {
			w.seal(l, l.lac)
		}
		w.stats.closes++
		if current {
			n.m.LedgerClosed(id, l.last)
		}
	})
}

// seal closes l at last, dropping the entries beyond it.
func (w *simWorld) seal(l *simLedger, last int64) {
	l.closed, l.last = true, last
	l.entries = l.entries[:last+1]
	w.logf("L%d closed at %d", l.id, last)
	w.check.durable(l)
}

// recover closes a dead writer's ledger keeping its LAC and a random part
// of the entries beyond it (they may have reached a store).
func (w *simWorld) recover(l *simLedger) {
	if l.closed {
		return
	}
	last := l.lac + int64(w.rng.IntN(len(l.entries)-int(l.lac)))
	if w.brokenRecovery && l.lac > 0 {
		last = l.lac - 1
	}
	w.seal(l, last)
}

// confirm advances an open ledger's LAC of a live writer.
func (w *simWorld) confirm(n *simNode) bool {
	var l *simLedger
	for _, id := range sortedIDs(n.writers, func(bool) bool { return true }) {
		if c := w.ledger.all[id]; !c.closed && c.lac+1 < int64(len(c.entries)) && (l == nil || w.rng.IntN(2) == 0) {
			l = c
		}
	}
	if l == nil {
		return false
	}
	l.lac += 1 + int64(w.rng.IntN(len(l.entries)-int(l.lac)-1))
	w.logf("%s: L%d confirmed through %d", n.incarnation, l.id, l.lac)
	w.check.durable(l)
	n.m.Confirmed(l.id, l.lac)
	return true
}

// takeFrame hands the node the oldest frame sent to it.
func (w *simWorld) takeFrame(n *simNode) bool {
	if len(n.inbox) == 0 {
		return false
	}
	f := n.inbox[0]
	n.inbox = n.inbox[1:]
	n.m.Produce(f)
	return true
}

// answerGrant answers the node's oldest grant request.
func (w *simWorld) answerGrant(n *simNode) bool {
	if len(n.grants) == 0 {
		return false
	}
	g := n.grants[0]
	n.grants = n.grants[1:]
	if l := w.ledger.all[g.Ledger]; l == nil || l.closed || w.revoked[n.incarnation] || w.rng.IntN(20) == 0 {
		w.logf("%s: grant of batch %d on L%d refused", n.incarnation, g.BatchID, g.Ledger)
		n.m.GrantRefused(g.BatchID, g.Ledger)
		return true
	}
	first := w.nextOffset
	w.nextOffset += uint64(g.Count)
	w.logf("%s: batch %d granted [%d,%d) on L%d", n.incarnation, g.BatchID, first, w.nextOffset, g.Ledger)
	n.m.Granted(g.BatchID, first)
	return true
}

// register is InitProducer's etcd part: the name's record gets a new
// epoch; a live owner stays the owner (the takeover that follows takes it
// over), a gone one is replaced by n.
func (w *simWorld) register(name string, incarnation string) (*simProducerRecord, error) {
	if w.revoked[incarnation] { // the record may name only a live owner
		w.logf("%s cannot register %s: its lease is gone", incarnation, name)
		return nil, apierr.New(apierr.Unavailable, "lease gone")
	}
	id, ok := w.etcd.byName[name]
	if !ok {
		w.etcd.nextID++
		id = w.etcd.nextID
		w.etcd.byName[name] = id
		w.etcd.producers[id] = &simProducerRecord{id: id, name: name}
	}
	rec := w.etcd.producers[id]
	rec.epoch++
	if rec.owner == "" || w.revoked[rec.owner] {
		rec.owner = incarnation
		rec.gen++
	}
	w.logf("%s registers %s: producer %d epoch %d", incarnation, name, id, rec.epoch)
	return rec, nil
}

// takeover is the etcd and ledger part of a Takeover: ownership at the
// asked epoch, then a live previous owner asked to release the producer
// (waiting: the answer comes later, through released), or the state
// rebuilt from the ledgers (fencing the previous owner, recovering the
// old writer's unclosed ones).
func (w *simWorld) takeover(n *simNode, incarnation string, t Takeover) (result TakeoverResult, waiting bool) {
	w.stats.takeovers++
	rec := w.etcd.producers[t.Producer]
	result = TakeoverResult{Producer: t.Producer, Epoch: t.Epoch, Session: t.Session}
	if rec == nil {
		result.Err = apierr.New(apierr.UnknownProducer, "producer %d is not registered", t.Producer)
		return result, false
	}
	result.Current = rec.epoch
	if w.revoked[incarnation] || w.rng.IntN(30) == 0 {
		w.logf("etcd fails %s's takeover of p%d", incarnation, t.Producer)
		result.Err = apierr.New(apierr.Unavailable, "etcd is unavailable")
		return result, false
	}
	if rec.epoch != t.Epoch {
		result.Err = StaleEpochError(t.Producer, t.Epoch, rec.epoch)
		return result, false
	}
	previous := rec.owner
	if previous != incarnation {
		rec.owner = incarnation
		rec.gen++
	}
	gen := rec.gen
	// The holders that may still log it: the previous owner, and the writer
	// of its state ledger (an owner that took it over and died before it
	// settled left that one releasing it, named by no record).
	holders := []string{previous}
	if rec.stateLedger != 0 && w.ledger.all[rec.stateLedger].writer != previous {
		holders = append(holders, w.ledger.all[rec.stateLedger].writer)
	}
	var ask *simRelease
	for _, h := range holders {
		if h == "" || h == incarnation {
			continue
		}
		if owner := w.liveNode(h); owner != nil && ask == nil && w.rng.IntN(4) != 0 {
			ask = &simRelease{to: n, inc: incarnation, from: h, t: t, rec: rec, gen: gen, epoch: rec.epoch}
			w.askRelease(owner, ask)
			continue
		}
		w.fenceOwner(h, incarnation)
	}
	if ask != nil {
		return result, true
	}
	return w.rebuiltTakeover(incarnation, "", t, rec, gen, rec.epoch), false
}

// rebuiltTakeover fences a holder that did not release the producer (""
// when every holder is fenced already) and rebuilds the producer's state
// from the ledgers.
func (w *simWorld) rebuiltTakeover(incarnation, holder string, t Takeover, rec *simProducerRecord, gen, epoch uint64) TakeoverResult {
	w.fenceOwner(holder, incarnation)
	result := TakeoverResult{Producer: t.Producer, Epoch: t.Epoch, Session: t.Session, Current: epoch, OwnerGen: gen}
	result.State = w.rebuild(t.Producer, rec.stateLedger)
	w.settledEpoch(&result, rec, incarnation, gen)
	w.logf("%s takes p%d over at epoch %d: next seq %d", incarnation, t.Producer, t.Epoch, result.State.DurableNext)
	return result
}

// settledEpoch is the driver's read of the record once the handover is
// done: the state settles at the record's epoch now (an InitProducer at
// the previous owner may have raised it meanwhile), and a record that
// moved on fails the takeover.
func (w *simWorld) settledEpoch(result *TakeoverResult, rec *simProducerRecord, incarnation string, gen uint64) {
	if rec.owner != incarnation || rec.gen != gen {
		result.Err = apierr.New(apierr.Unavailable, "producer %d moved during its takeover", rec.id)
		return
	}
	result.Current = rec.epoch
	result.State.Epoch = max(result.State.Epoch, rec.epoch)
}

// liveNode is the node whose current, unrevoked incarnation is inc.
func (w *simWorld) liveNode(inc string) *simNode {
	for _, n := range w.nodes {
		if n.alive && n.incarnation == inc && !w.revoked[inc] {
			return n
		}
	}
	return nil
}

// askRelease sends the previous owner a Release; now and then the new
// owner also gives up waiting before the answer (its timeout).
func (w *simWorld) askRelease(owner *simNode, r *simRelease) {
	w.tokens++
	token := w.tokens
	w.releases[token] = r
	w.logf("%s asks %s to release p%d (token %d)", r.inc, r.from, r.t.Producer, token)
	w.later(owner, fmt.Sprintf("release p%d", r.t.Producer), func(current bool) {
		if !current {
			w.releaseFailed(token, "the previous owner lost its lease")
			return
		}
		owner.m.ReleaseProducer(r.t.Producer, token)
	})
	if w.rng.IntN(8) == 0 {
		w.later(r.to, fmt.Sprintf("release p%d times out", r.t.Producer), func(bool) { w.releaseFailed(token, "timed out") })
	}
}

// released is the previous owner's answer to a Release.
func (w *simWorld) released(answer ProducerReleased) {
	r := w.releases[answer.Token]
	if r == nil {
		return // the new owner stopped waiting
	}
	if answer.Err != nil {
		w.releaseFailed(answer.Token, answer.Err.Error())
		return
	}
	delete(w.releases, answer.Token)
	if answer.NotHeld {
		w.logf("%s does not hold p%d: %s rebuilds it", r.from, r.t.Producer, r.inc)
		w.deliverTakeover(r, func() TakeoverResult { return w.rebuiltTakeover(r.inc, "", r.t, r.rec, r.gen, r.epoch) })
		return
	}
	w.stats.released++
	w.logf("%s released p%d to %s: next seq %d", r.from, r.t.Producer, r.inc, answer.State.DurableNext)
	w.deliverTakeover(r, func() TakeoverResult {
		state := answer.State
		result := TakeoverResult{Producer: r.t.Producer, Epoch: r.t.Epoch, Session: r.t.Session, Current: r.epoch,
			OwnerGen: r.gen, State: state}
		w.settledEpoch(&result, r.rec, r.inc, r.gen)
		return result
	})
}

// releaseFailed ends a Release that was refused, timed out or lost with its
// node: the new owner fences the previous one and rebuilds instead.
func (w *simWorld) releaseFailed(token uint64, why string) {
	r := w.releases[token]
	if r == nil {
		return
	}
	delete(w.releases, token)
	w.logf("release of p%d to %s failed (%s): fencing %s", r.t.Producer, r.inc, why, r.from)
	w.deliverTakeover(r, func() TakeoverResult { return w.rebuiltTakeover(r.inc, r.from, r.t, r.rec, r.gen, r.epoch) })
}

// failReleasesFrom fails the Releases a crashed node will never answer
// (asked of any of its incarnations: the crash drops every event it had
// pending), in token order.
func (w *simWorld) failReleasesFrom(n *simNode) {
	var tokens []uint64
	for token, r := range w.releases {
		if strings.HasPrefix(r.from, fmt.Sprintf("n%d.", n.slot)) {
			tokens = append(tokens, token)
		}
	}
	slices.Sort(tokens)
	for _, token := range tokens {
		w.releaseFailed(token, n.incarnation+" crashed")
	}
}

// deliverTakeover hands a waiting takeover its outcome, later, if the
// incarnation that started it is still the node's.
func (w *simWorld) deliverTakeover(r *simRelease, outcome func() TakeoverResult) {
	if !r.to.alive || r.to.incarnation != r.inc {
		return
	}
	w.later(r.to, fmt.Sprintf("takeover p%d done", r.t.Producer), func(current bool) {
		if result := outcome(); current {
			r.to.m.TakeoverDone(result)
		}
	})
}

func (w *simWorld) rebuild(id, stateLedger uint64) producer.State {
	b := NewStateBuilder(id, 8)
	if stateLedger == 0 {
		return b.State()
	}
	writer := w.ledger.all[stateLedger].writer
	for _, lid := range w.ledgerIDs() {
		l := w.ledger.all[lid]
		if lid < stateLedger || l.writer != writer {
			continue
		}
		if !l.closed && w.writerAlive(writer) {
			// Its own ledger, when a node takes back a producer whose
			// session it dropped: the recovery fences the live writer,
			// whose close then reads back the recovered last.
			w.logf("rebuild of p%d fences L%d of its live writer %s", id, lid, writer)
		}
		w.recover(l)
		for _, e := range l.entries[:l.last+1] {
			if err := b.Apply(e.payload); err != nil {
				w.fatalf("rebuild of p%d from L%d: %v", id, lid, err)
			}
		}
	}
	return b.State()
}

// checkWriter tells a node its open ledger was closed under it (a
// recovery fenced it), as the writer's health check does.
func (w *simWorld) checkWriter(n *simNode) bool {
	for _, id := range sortedIDs(n.writers, func(bool) bool { return true }) {
		if w.ledger.all[id].closed {
			n.m.LedgerFailed(id)
			return true
		}
	}
	return false
}

// fenceOwner is the takeover's fence of a previous owner that is still
// registered: its lease is revoked. The node notices later (its keepalive
// ends): it gives up every producer and registers a new incarnation.
func (w *simWorld) fenceOwner(previous, self string) {
	if previous == "" || previous == self || w.revoked[previous] {
		return
	}
	w.revoked[previous] = true
	w.logf("%s revokes the lease of %s", self, previous)
	for _, n := range w.nodes {
		if n.alive && n.incarnation == previous {
			w.later(n, "lease lost", func(current bool) {
				if current {
					w.leaseLost(n)
				}
			})
		}
	}
}

// leaseLost is the driver's answer to a lost lease: close the open ledger
// as the old incarnation, give everything up, and register anew.
func (w *simWorld) leaseLost(n *simNode) {
	for _, id := range sortedIDs(n.writers, func(bool) bool { return true }) {
		w.closeLedger(n, id)
	}
	n.m.OwnershipLost(apierr.New(apierr.Unavailable, "lease lost"))
	n.generation++
	n.incarnation = fmt.Sprintf("n%d.%d", n.slot, n.generation)
	w.revoked[n.incarnation] = false
	n.grants = nil // the old grant session's answers never come
	w.stats.leaseLosses++
	w.logf("%s registers after a lost lease", n.incarnation)
}

func stateIDs(states []producer.State) []uint64 {
	ids := make([]uint64, len(states))
	for i, s := range states {
		ids[i] = s.ID
	}
	return ids
}

func (w *simWorld) writerAlive(incarnation string) bool {
	for _, n := range w.nodes {
		if n.alive && n.incarnation == incarnation {
			return true
		}
	}
	return false
}

func (w *simWorld) ledgerIDs() []uint64 {
	ids := make([]uint64, 0, len(w.ledger.all))
	for id := range w.ledger.all {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// recordState is RecordStates's etcd part.
func (w *simWorld) recordState(incarnation string, r StateRecord) error {
	w.check.snapshotDurable(r)
	if w.revoked[incarnation] || w.rng.IntN(20) == 0 {
		w.logf("etcd fails to record p%d's state ledger", r.Producer)
		return apierr.New(apierr.Unavailable, "etcd is unavailable")
	}
	rec := w.etcd.producers[r.Producer]
	if rec.owner != incarnation || rec.gen != r.OwnerGen {
		return apierr.New(apierr.Unavailable, "producer %d moved to another node: retry there", r.Producer)
	}
	rec.stateLedger = r.Ledger
	return nil
}

// answered hands a frame's answer to the client that sent it.
func (w *simWorld) answered(n *simNode, f *Frame) {
	resp := f.Response()
	switch owner := f.Owner.(type) {
	case *simSent:
		owner.client.answered(w, n, owner, resp)
	case *simKeyedSent:
		w.keyed.answered(w, n, owner, resp)
	}
}

func (w *simWorld) initDone(n *simNode, done InitDone) {
	for _, c := range w.clients {
		if c.initToken == done.Token && c.node == n.slot && c.initPending {
			c.initialized(w, done)
			return
		}
	}
}

// frameOf builds a produce request.
func simRequest(id, epoch, firstSeq uint64, values []string) *orderlogpb.ProduceRequest {
	req := &orderlogpb.ProduceRequest{ProducerId: id, Epoch: epoch, FirstSeq: firstSeq}
	for _, v := range values {
		req.Messages = append(req.Messages, &orderlogpb.Message{Value: []byte(v)})
	}
	return req
}
