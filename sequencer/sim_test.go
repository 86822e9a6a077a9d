package sequencer

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"
)

// The simulation runs leaders (Machines), ingest writers and ledgers in one
// deterministic world driven by a seeded random schedule, and checks the §9
// invariants after every step. Ledgers follow the §4 rules in miniature: a
// writer confirms entries in order, closes at its LAC, recovery fences and
// keeps the LAC plus a random prefix of the unconfirmed entries.

type simLedgerState uint8

const (
	simOpen simLedgerState = iota
	simRecovering
	simClosed
)

type simEntry struct {
	span    Range    // ingest ledgers
	records []Record // commit ledgers
	maxSeq  uint64
}

type simLedger struct {
	id, epoch uint64
	writer    string // ingest incarnation; "" for a commit ledger
	state     simLedgerState
	entries   []simEntry
	lac       int64 // entries[0..lac] confirmed
	last      int64 // when closed
	keep      int64 // when recovering: the last entry recovery keeps
	leader    *simLeader
}

func (l *simLedger) confirmedUpTo() int64 {
	if l.state == simClosed {
		return l.last
	}
	return l.lac
}

type simLeader struct {
	epoch   uint64
	m       *Machine
	commit  *simLedger
	granted bool // issued at least one grant
	// partitioned: once deposed, this leader never hears of ledger closes
	// and its clock stands still (a paused process that resumes): it keeps
	// granting on its old ledgers from its old block.
	partitioned bool
	frozenAt    time.Duration
	c0          uint64
	// served are the Written and Hole records its commit map gives readers:
	// the settled part of its replay, then its own confirmed ones. Readers
	// refuse two different records for one offset.
	served []Record
}

// serve adds a confirmed record to what the leader serves readers.
func (ld *simLeader) serve(w *simWorld, r Record) {
	if r.Kind == KindWatermark {
		return
	}
	r.Seq = 0
	for _, s := range ld.served {
		if s.Range.First < r.Range.End && r.Range.First < s.Range.End && s != r {
			w.fatalf("epoch %d serves readers both %v and %v", ld.epoch, s, r)
		}
	}
	ld.served = append(ld.served, r)
}

type simGrant struct {
	r      Range
	ledger *simLedger
	sent   bool
}

type simIngest struct {
	name     string
	alive    bool
	goneSent bool
	leader   *simLeader
	session  SessionID
	ledger   *simLedger
	nextReq  uint64
	grants   []*simGrant
	reported map[*simLedger]int64 // highest entry reported Written
}

type offsetFacts struct {
	grantedBy  uint64 // epoch, 0 = never granted
	deposed    bool   // granted by a leader after a newer epoch granted
	resolved   RecordKind
	ledger     uint64
	entry      int64
	confirmed  bool // lies in a confirmed entry of an ingest ledger
	confLedger uint64
	confEntry  int64
}

type simWorld struct {
	t        *testing.T
	rng      *rand.Rand
	now      time.Duration
	epoch    uint64
	reserved uint64
	ledgers  []*simLedger
	commits  []*simLedger // commit ledgers in epoch order
	leaders  []*simLeader
	ingests  []*simIngest
	bySess   map[SessionID]*simIngest
	nextSess SessionID
	nextInc  int

	closeQ   []uint64
	recoverQ []uint64
	reserveQ []simReserve

	facts         []offsetFacts
	deposedGrants int               // grants by a leader after a newer one granted
	settledCloses int               // writer closes told without spans (LedgerSettled)
	confirmedC    map[uint64]uint64 // epoch → highest confirmed Watermark
	maxPublished  uint64
	step          int
}

type simReserve struct {
	leader *simLeader
	req    Reservation
}

func (w *simWorld) fact(x uint64) *offsetFacts {
	for uint64(len(w.facts)) <= x {
		w.facts = append(w.facts, offsetFacts{})
	}
	return &w.facts[x]
}

func (w *simWorld) fatalf(format string, args ...any) {
	w.t.Helper()
	w.t.Fatalf("step %d t=%v: %s", w.step, w.now, fmt.Sprintf(format, args...))
}

func simConfig(epoch uint64) MachineConfig {
	return MachineConfig{
		Epoch: epoch, GrantLease: 2 * time.Second, SessionTimeout: time.Second,
		CloseTimeout: 100 * time.Millisecond, MinReserveBlock: 200, ReserveAhead: 200 * time.Millisecond,
		MaxGrant: 8,
	}
}

func (w *simWorld) newLedger(epoch uint64, writer string) *simLedger {
	l := &simLedger{id: uint64(len(w.ledgers) + 1), epoch: epoch, writer: writer, lac: -1, last: -1}
	w.ledgers = append(w.ledgers, l)
	return l
}

func (w *simWorld) current() *simLeader { return w.leaders[len(w.leaders)-1] }

// elect runs steps 1–3 of §5 for a new leader and starts its Machine.
func (w *simWorld) elect() {
	w.epoch += 1 + uint64(w.rng.IntN(3))
	// Step 2: fence and recover every commit ledger, replay → C₀.
	var entries [][]byte
	for _, cl := range w.commits {
		w.fence(cl)
		w.closeAt(cl, cl.keep)
		for _, e := range cl.entries[:cl.last+1] {
			entries = append(entries, EncodeCommitEntry(nil, cl.epoch, e.records))
		}
	}
	cm, err := Replay(entries)
	if err != nil {
		w.fatalf("replay: %v", err)
	}
	// Step 3: R, unclosed older ledgers, closed ledgers reaching C₀.
	t := Takeover{C0: cm.C, Reserved: w.reserved}
	for _, l := range w.ledgers {
		if l.writer == "" {
			continue
		}
		switch l.state {
		case simOpen, simRecovering:
			t.Unclosed = append(t.Unclosed, UnclosedLedger{LedgerRef{l.id, l.writer, l.epoch}, l.state == simRecovering})
		case simClosed:
			if spans := w.spans(l); len(spans) > 0 && spans[len(spans)-1].Range.End > cm.C {
				t.Closed = append(t.Closed, ClosedLedger{ID: l.id, Spans: spans})
			}
		}
	}
	m, err := NewMachine(simConfig(w.epoch), t, w.now)
	if err != nil {
		w.fatalf("new machine: %v", err)
	}
	ld := &simLeader{epoch: w.epoch, m: m, c0: cm.C, partitioned: w.rng.IntN(2) == 0}
	for _, r := range cm.Settled() {
		ld.serve(w, r.Record)
	}
	w.confirmedC[w.epoch] = cm.C
	ld.commit = w.newLedger(w.epoch, "")
	ld.commit.leader = ld
	w.commits = append(w.commits, ld.commit)
	w.leaders = append(w.leaders, ld)
	w.ready(ld)
}

func (w *simWorld) spans(l *simLedger) []EntrySpan {
	var out []EntrySpan
	for i, e := range l.entries[:l.confirmedUpTo()+1] {
		out = append(out, EntrySpan{Entry: int64(i), Range: e.span})
	}
	return out
}

// fence starts a recovery: no more appends or confirmations; recovery will
// keep the LAC plus a random prefix of the unconfirmed entries.
func (w *simWorld) fence(l *simLedger) {
	if l.state != simOpen {
		return
	}
	l.state = simRecovering
	l.keep = l.lac + int64(w.rng.IntN(len(l.entries)-int(l.lac)))
}

// closeAt closes l at last (the first close wins).
func (w *simWorld) closeAt(l *simLedger, last int64) {
	if l.state == simClosed {
		return
	}
	l.state, l.last = simClosed, last
	l.entries = l.entries[:last+1]
	if l.writer == "" {
		w.confirmCommit(l, last)
	} else {
		w.confirmIngest(l, last)
	}
}

func (w *simWorld) confirmIngest(l *simLedger, upTo int64) {
	for _, ld := range w.leaders {
		if ld.epoch > l.epoch && ld.granted && upTo > l.lac {
			// Real-time order: an older epoch's entry acknowledged after a
			// newer leader granted could be acked after a higher offset.
			w.fatalf("ledger %d of epoch %d confirms entries after epoch %d granted", l.id, l.epoch, ld.epoch)
		}
	}
	for i := l.lac + 1; i <= upTo; i++ {
		for x := l.entries[i].span.First; x < l.entries[i].span.End; x++ {
			f := w.fact(x)
			if f.resolved == KindHole {
				w.fatalf("offset %d confirmed in %d/%d but is a hole", x, l.id, i)
			}
			if f.deposed {
				w.fatalf("offset %d granted by a deposed leader was confirmed", x)
			}
			f.confirmed, f.confLedger, f.confEntry = true, l.id, i
		}
	}
	l.lac = max(l.lac, upTo)
}

func (w *simWorld) confirmCommit(l *simLedger, upTo int64) {
	for i := l.lac + 1; i <= upTo; i++ {
		e := l.entries[i]
		for _, r := range e.records {
			w.applyTruth(l.epoch, r)
			if l.leader != nil {
				l.leader.serve(w, r)
			}
		}
		if l.leader != nil {
			l.leader.m.Confirmed(e.maxSeq)
		}
	}
	l.lac = max(l.lac, upTo)
}

// applyTruth records a confirmed commit record; it must agree with every
// earlier confirmed decision and with the ledgers.
func (w *simWorld) applyTruth(epoch uint64, r Record) {
	if r.Kind == KindWatermark {
		w.confirmedC[epoch] = max(w.confirmedC[epoch], r.Watermark)
		return
	}
	for x := r.Range.First; x < r.Range.End; x++ {
		f := w.fact(x)
		if f.resolved != 0 && (f.resolved != r.Kind || f.ledger != r.Ledger || f.entry != r.Entry) {
			w.fatalf("offset %d decided %v %d/%d, now %v (epoch %d)", x, f.resolved, f.ledger, f.entry, r, epoch)
		}
		switch r.Kind {
		case KindHole:
			if f.confirmed {
				w.fatalf("hole %v covers confirmed offset %d of %d/%d", r, x, f.confLedger, f.confEntry)
			}
		case KindWritten:
			if f.deposed {
				w.fatalf("written %v covers offset %d granted by a deposed leader", r, x)
			}
			if !f.confirmed || f.confLedger != r.Ledger || f.confEntry != r.Entry {
				w.fatalf("written %v but offset %d confirmed=%v in %d/%d", r, x, f.confirmed, f.confLedger, f.confEntry)
			}
		}
		f.resolved, f.ledger, f.entry = r.Kind, r.Ledger, r.Entry
	}
}

// ready routes one leader's outputs and checks the grant invariants.
func (w *simWorld) ready(ld *simLeader) {
	for id, s := range ld.m.sessions {
		if cur, ok := ld.m.current[s.incarnation]; !ok || cur != id || s.ended {
			w.fatalf("epoch %d: session %d of %q is kept but not its current stream (current %d, ended %v)",
				ld.epoch, id, s.incarnation, cur, s.ended)
		}
	}
	rd := ld.m.Ready()
	for _, v := range rd.Violations {
		w.fatalf("epoch %d violation: %v", ld.epoch, v)
	}
	for _, g := range rd.Grants {
		w.onGrant(ld, g)
	}
	if len(rd.Records) > 0 && ld.commit.state == simOpen {
		ld.commit.entries = append(ld.commit.entries, simEntry{records: append([]Record(nil), rd.Records...), maxSeq: rd.Records[len(rd.Records)-1].Seq})
	}
	for _, c := range rd.Closes {
		w.closeQ = append(w.closeQ, c.Ledger)
	}
	w.recoverQ = append(w.recoverQ, rd.Recovers...)
	if rd.Reserve != nil {
		w.reserveQ = append(w.reserveQ, simReserve{ld, *rd.Reserve})
	}
	if rd.HasPublished {
		w.onPublish(ld, rd.Published)
	}
	for _, id := range rd.EndSessions {
		if in := w.bySess[id]; in != nil && in.session == id {
			in.session, in.leader = 0, nil
		}
	}
}

func (w *simWorld) onGrant(ld *simLeader, g GrantReply) {
	in := w.bySess[g.Session]
	if g.Status != StatusGranted {
		// A refusal: the writer gives up that ledger, or that leader.
		if in != nil && in.session == g.Session {
			switch g.Status {
			case StatusNotLeader, StatusSessionDead:
				in.session, in.leader = 0, nil
			default:
				if in.ledger != nil && in.ledger.id == g.Ledger {
					in.ledger = nil
				}
			}
		}
		return
	}
	if g.Range.End > w.reserved && ld.epoch == w.epoch {
		w.fatalf("grant %v beyond reservation %d", g.Range, w.reserved)
	}
	deposed := false
	for _, o := range w.leaders {
		if o.epoch > ld.epoch && o.granted {
			deposed = true
		}
	}
	if deposed {
		w.deposedGrants++
	}
	for x := g.Range.First; x < g.Range.End; x++ {
		f := w.fact(x)
		if f.grantedBy != 0 {
			w.fatalf("offset %d granted by epoch %d and again by %d", x, f.grantedBy, ld.epoch)
		}
		f.grantedBy, f.deposed = ld.epoch, deposed
	}
	ld.granted = true
	var l *simLedger
	for _, c := range w.ledgers {
		if c.id == g.Ledger {
			l = c
		}
	}
	if in != nil && in.alive {
		in.grants = append(in.grants, &simGrant{r: g.Range, ledger: l})
	}
}

func (w *simWorld) onPublish(ld *simLeader, c uint64) {
	if c > w.confirmedC[ld.epoch] {
		w.fatalf("epoch %d published C=%d before Watermark(%d) was confirmed (confirmed %d)", ld.epoch, c, c, w.confirmedC[ld.epoch])
	}
	if ld.epoch == w.current().epoch {
		if c < w.maxPublished {
			w.fatalf("epoch %d published C=%d below %d", ld.epoch, c, w.maxPublished)
		}
	} else if c > w.current().c0 {
		w.fatalf("deposed epoch %d published C=%d above successor's C0=%d", ld.epoch, c, w.current().c0)
	}
	for x := uint64(0); x < c; x++ {
		if w.fact(x).resolved == 0 {
			w.fatalf("C=%d published by epoch %d but offset %d unresolved", c, ld.epoch, x)
		}
	}
	w.maxPublished = max(w.maxPublished, c)
}

// --- actions ---

func (w *simWorld) tick() {
	w.now += time.Duration(w.rng.IntN(120)) * time.Millisecond
	w.tickLeaders()
}

// nowFor is the time a leader sees: a partitioned deposed leader's clock
// stopped when it was deposed.
func (w *simWorld) nowFor(ld *simLeader) time.Duration {
	if ld.partitioned && ld != w.current() {
		if ld.frozenAt == 0 {
			ld.frozenAt = w.now
		}
		return ld.frozenAt
	}
	return w.now
}

func (w *simWorld) tickLeaders() {
	for _, ld := range w.leaders {
		if ld != w.current() && ld.partitioned {
			continue
		}
		ld.m.Tick(w.now)
	}
}

func (w *simWorld) ingestAction(in *simIngest) {
	ld := in.leader
	switch k := w.rng.IntN(10); {
	case in.session == 0 || ld == nil:
		// Connect, usually to the current leader; sometimes a deposed one.
		ld = w.current()
		if w.rng.IntN(2) == 0 {
			ld = w.leaders[w.rng.IntN(len(w.leaders))]
		}
		w.nextSess++
		in.session, in.leader = w.nextSess, ld
		w.bySess[in.session] = in
		ld.m.SessionOpened(w.nowFor(ld), in.session, in.name, 1)
	case ld != w.current() && w.rng.IntN(16) == 0:
		// Move to the newest leader: the old stream ends.
		ld.m.SessionClosed(w.nowFor(ld), in.session)
		in.session, in.leader = 0, nil
	case in.ledger == nil || in.ledger.epoch != ld.epoch || in.ledger.state != simOpen && w.rng.IntN(4) == 0:
		// (A writer whose ledger was closed by someone else may not have
		// noticed yet and keep asking for grants on it.)
		// Creating a ledger compares seq/epoch with the ledger's epoch.
		if w.epoch != ld.epoch || in.goneSent {
			ld.m.Heard(w.nowFor(ld), in.session)
			return
		}
		in.ledger = w.newLedger(ld.epoch, in.name)
		ld.m.LedgerOpened(LedgerRef{in.ledger.id, in.name, in.ledger.epoch})
	case k < 3:
		in.nextReq++
		ld.m.RequestGrant(w.nowFor(ld), in.session, in.nextReq, in.ledger.id, 1+uint64(w.rng.IntN(8)))
	case k < 5:
		w.appendGrants(in)
	case k < 6:
		w.unused(in)
	case k < 9:
		w.reportWritten(in)
	default:
		ld.m.Heard(w.nowFor(ld), in.session)
	}
}

// appendGrants sends AddEntry for granted grants, in grant order, into the
// ledger they were granted to while it is open.
func (w *simWorld) appendGrants(in *simIngest) {
	for _, g := range in.grants {
		if g.sent || g.ledger == nil || g.ledger.state != simOpen {
			continue
		}
		g.sent = true
		g.ledger.entries = append(g.ledger.entries, simEntry{span: g.r})
		if w.rng.IntN(2) == 0 {
			return
		}
	}
}

// unused reports one grant for which no AddEntry was sent.
func (w *simWorld) unused(in *simIngest) {
	for i, g := range in.grants {
		if !g.sent && g.ledger != nil {
			in.leader.m.Unused(w.nowFor(in.leader), in.session, g.ledger.id, g.r)
			in.grants = append(in.grants[:i], in.grants[i+1:]...)
			return
		}
	}
}

// reportWritten reports the confirmed entries of the ingest's ledgers.
func (w *simWorld) reportWritten(in *simIngest) {
	for _, l := range w.ledgers {
		if l.writer != in.name {
			continue
		}
		from := in.reported[l] + 1
		for i := from; i <= l.lac && i < int64(len(l.entries)); i++ {
			in.leader.m.Written(w.nowFor(in.leader), in.session, l.id, i, l.entries[i].span)
			in.reported[l] = i
		}
	}
}

func (w *simWorld) confirmSome() {
	var open []*simLedger
	for _, l := range w.ledgers {
		if l.state == simOpen && l.lac+1 < int64(len(l.entries)) {
			open = append(open, l)
		}
	}
	if len(open) == 0 {
		return
	}
	l := open[w.rng.IntN(len(open))]
	upTo := l.lac + 1 + int64(w.rng.IntN(int(int64(len(l.entries))-l.lac-1)))
	if l.writer == "" {
		w.confirmCommit(l, upTo)
	} else {
		w.confirmIngest(l, upTo)
	}
}

// closeByWriter handles a close request: a live writer closes at its LAC.
func (w *simWorld) closeByWriter() {
	if len(w.closeQ) == 0 {
		return
	}
	id := w.closeQ[0]
	w.closeQ = w.closeQ[1:]
	l := w.ledgers[id-1]
	for _, in := range w.ingests {
		if in.name == l.writer && in.alive && l.state == simOpen && w.rng.IntN(3) > 0 {
			w.closeAt(l, l.lac)
			w.tellClosed(l, true)
		}
	}
}

// recoverOne progresses one recovery; a recovery can stop half-way
// (fenced, not closed), as if its leader died.
func (w *simWorld) recoverOne() {
	if len(w.recoverQ) == 0 {
		return
	}
	id := w.recoverQ[0]
	w.recoverQ = w.recoverQ[1:]
	l := w.ledgers[id-1]
	w.fence(l)
	if w.rng.IntN(5) == 0 {
		// Half-way: fenced, not closed. A new leader may find it so; the
		// requester's I/O loop retries later.
		w.recoverQ = append(w.recoverQ, id)
		return
	}
	w.closeAt(l, l.keep)
	w.tellClosed(l, false)
}

// tellClosed feeds LedgerClosed to the current leader and, sometimes, to
// deposed ones that know the ledger (the I/O loop reads the spans from the
// stores). A deposed leader that is not told keeps granting on the closed
// ledger from its old block. A ledger its writer closed is, at random,
// closed without spans when the leader finds it settled, as the leader's
// I/O loop does to skip reading a rolled ledger back.
func (w *simWorld) tellClosed(l *simLedger, byWriter bool) {
	for _, ld := range w.leaders {
		if ld != w.current() && ld.partitioned {
			continue
		}
		if !ld.m.KnowsLedger(l.id) {
			continue
		}
		spans := w.spans(l)
		if byWriter && ld.m.LedgerSettled(l.id, l.writer) && w.rng.IntN(2) == 0 {
			spans = nil
			w.settledCloses++
		}
		ld.m.LedgerClosed(w.nowFor(ld), l.id, spans)
	}
}

// pausedLeaderGrants has a paused (partitioned) deposed leader resume and
// serve a grant request from a writer of one of its epoch's ledgers, which
// may meanwhile have been closed by the new leader.
func (w *simWorld) pausedLeaderGrants() {
	for _, ld := range w.leaders {
		if ld == w.current() || !ld.partitioned {
			continue
		}
		for _, in := range w.ingests {
			if !in.alive || in.ledger == nil || in.ledger.epoch != ld.epoch {
				continue
			}
			if in.leader != ld {
				w.nextSess++
				in.session, in.leader = w.nextSess, ld
				w.bySess[in.session] = in
				ld.m.SessionOpened(w.nowFor(ld), in.session, in.name, 1)
			}
			in.nextReq++
			ld.m.RequestGrant(w.nowFor(ld), in.session, in.nextReq, in.ledger.id, 1+uint64(w.rng.IntN(8)))
			return
		}
	}
}

func (w *simWorld) reserveOne() {
	if len(w.reserveQ) == 0 {
		return
	}
	r := w.reserveQ[0]
	w.reserveQ = w.reserveQ[1:]
	switch {
	case r.leader.partitioned && r.leader != w.current():
		// A paused leader never hears back.
	case r.leader.epoch == w.epoch && w.reserved == r.req.Expect:
		w.reserved = r.req.New
		r.leader.m.ReservationExtended(r.req.New)
	case r.leader.epoch != w.epoch && w.rng.IntN(2) == 0:
		r.leader.m.Deposed()
	default:
		r.leader.m.ReservationFailed()
	}
}

func (w *simWorld) killIngest() {
	in := w.ingests[w.rng.IntN(len(w.ingests))]
	if !in.alive {
		if !in.goneSent {
			// The dead node's etcd lease expires: ingest/<incarnation> is deleted.
			in.goneSent = true
			for _, ld := range w.leaders {
				ld.m.IncarnationGone(w.nowFor(ld), in.name)
			}
		}
		return
	}
	in.alive = false
	w.nextInc++
	w.ingests = append(w.ingests, &simIngest{name: "ingest-" + strconv.Itoa(w.nextInc), alive: true, reported: map[*simLedger]int64{}})
}

func (w *simWorld) step1() {
	w.step++
	switch k := w.rng.IntN(100); {
	case k < 15:
		w.tick()
	case k < 55:
		var alive []*simIngest
		for _, in := range w.ingests {
			if in.alive {
				alive = append(alive, in)
			}
		}
		w.ingestAction(alive[w.rng.IntN(len(alive))])
	case k < 70:
		w.confirmSome()
	case k < 76:
		w.closeByWriter()
	case k < 84:
		w.recoverOne()
	case k < 92:
		w.reserveOne()
	case k < 95:
		w.killIngest()
	case k < 97:
		if w.rng.IntN(8) == 0 {
			w.elect()
		}
	case k < 99:
		w.pausedLeaderGrants()
	default:
		// A grant session dies without the stream closing: no heartbeats.
		w.now += 1500 * time.Millisecond
		w.tickLeaders()
	}
	for _, ld := range w.leaders {
		w.ready(ld)
	}
}

// settle stops the ingest nodes and runs the world until everything the
// current leader granted is resolved and published.
func (w *simWorld) settle() {
	for _, in := range w.ingests {
		in.alive = false
	}
	cur := w.current()
	for i := 0; i < 2000; i++ {
		w.step++
		w.now += 50 * time.Millisecond
		for _, ld := range w.leaders {
			ld.m.Tick(w.now)
			w.ready(ld)
		}
		for j := 0; j < 100 && (len(w.recoverQ) > 0 || len(w.reserveQ) > 0 || len(w.closeQ) > 0); j++ {
			w.closeQ = nil
			if len(w.recoverQ) > 0 {
				id := w.recoverQ[0]
				w.recoverQ = w.recoverQ[1:]
				l := w.ledgers[id-1]
				w.fence(l)
				w.closeAt(l, l.keep)
				w.tellClosed(l, false)
			}
			w.reserveOne()
			for _, ld := range w.leaders {
				w.ready(ld)
			}
		}
		if cur.commit.state == simOpen {
			w.confirmCommit(cur.commit, int64(len(cur.commit.entries))-1)
		}
		for _, ld := range w.leaders {
			w.ready(ld)
		}
		if cur.m.Serving() && cur.m.PublishedC() == cur.m.nextOffset {
			break
		}
	}
	if !cur.m.Serving() || cur.m.PublishedC() != cur.m.nextOffset {
		w.fatalf("did not settle: phase %v C=%d next=%d", cur.m.phase, cur.m.PublishedC(), cur.m.nextOffset)
	}
	// Every confirmed ingest entry below C is Written (acked ⇒ committed).
	for x := uint64(0); x < cur.m.PublishedC(); x++ {
		if f := w.fact(x); f.confirmed && f.resolved != KindWritten {
			w.fatalf("offset %d confirmed in %d/%d but resolved %v", x, f.confLedger, f.confEntry, f.resolved)
		}
	}
}

func runSim(t *testing.T, seed uint64, steps int) (leaders, written, deposedGrants, settledCloses uint64) {
	w := &simWorld{t: t, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), bySess: map[SessionID]*simIngest{}, confirmedC: map[uint64]uint64{}}
	for i := 0; i < 3; i++ {
		w.nextInc++
		w.ingests = append(w.ingests, &simIngest{name: "ingest-" + strconv.Itoa(w.nextInc), alive: true, reported: map[*simLedger]int64{}})
	}
	w.elect()
	for i := 0; i < steps; i++ {
		w.step1()
	}
	w.settle()
	for _, f := range w.facts {
		if f.resolved == KindWritten {
			written++
		}
	}
	return uint64(len(w.leaders)), written, uint64(w.deposedGrants), uint64(w.settledCloses)
}

func soakFactor() int {
	if n, err := strconv.Atoi(os.Getenv("ORDERLOG_SOAK")); err == nil && n > 0 {
		return n
	}
	return 1
}

func TestMachineRandomSchedules(t *testing.T) {
	seeds, steps := 60, 4000
	if testing.Short() {
		seeds = 20
	}
	seeds *= soakFactor()
	var elections, written, deposed, settledCloses uint64
	for seed := 1; seed <= seeds; seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			l, c, d, s := runSim(t, uint64(seed), steps)
			elections += l
			written += c
			deposed += d
			settledCloses += s
		})
	}
	// The schedules must exercise failover, deposed leaders granting from
	// their old block, and commit real work, or the checks prove nothing.
	if elections < uint64(seeds)*2 || written < uint64(seeds)*100 || deposed == 0 || settledCloses == 0 {
		t.Fatalf("weak schedules: %d leaders, %d offsets written, %d deposed grants, %d settled closes over %d seeds",
			elections, written, deposed, settledCloses, seeds)
	}
	t.Logf("%d seeds: %d leaders, %d offsets committed as Written, %d grants by deposed leaders, %d settled closes",
		seeds, elections, written, deposed, settledCloses)
}
