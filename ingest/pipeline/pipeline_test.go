package pipeline

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

func mustNew(t *testing.T, cfg Config) *Pipeline {
	t.Helper()
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func msgs(producer uint64, firstSeq uint64, n int) []Message {
	out := make([]Message, n)
	for i := range out {
		out[i] = Message{ProducerID: producer, Seq: firstSeq + uint64(i), Size: 10}
	}
	return out
}

func TestHappyPathSealsGrantsAppendsAndLogsInOrder(t *testing.T) {
	p := mustNew(t, Config{MaxBatchMessages: 2, MaxInFlight: 8})
	p.Add(msgs(1, 0, 3)...)
	r := p.Ready()
	if !r.NeedLedger || len(r.GrantRequests) != 0 {
		t.Fatalf("first ready %+v", r)
	}
	p.LedgerOpened(7)
	r = p.Ready()
	if len(r.GrantRequests) != 2 || r.GrantRequests[0].Count != 2 || r.GrantRequests[1].Count != 1 || r.GrantRequests[0].Ledger != 7 {
		t.Fatalf("grants %+v", r.GrantRequests)
	}
	// The second grant arrives first: nothing may be appended before the first.
	if err := p.Granted(r.GrantRequests[1].BatchID, 102); err != nil {
		t.Fatal(err)
	}
	if got := p.Ready(); len(got.Appends) != 0 {
		t.Fatalf("appended out of order: %+v", got.Appends)
	}
	if err := p.Granted(r.GrantRequests[0].BatchID, 100); err != nil {
		t.Fatal(err)
	}
	r = p.Ready()
	if len(r.Appends) != 2 || r.Appends[0].First != 100 || r.Appends[1].First != 102 {
		t.Fatalf("appends %+v", r.Appends)
	}
	for i, b := range r.Appends {
		if err := p.Appended(b.ID, int64(i+1)); err != nil { // entry 0 is the producer snapshot
			t.Fatal(err)
		}
	}
	p.Confirmed(7, 1)
	r = p.Ready()
	if len(r.Logged) != 1 || r.Logged[0].First != 100 || len(r.Written) != 1 || r.Written[0] != (WrittenReport{7, 1, Span{100, 102}}) {
		t.Fatalf("after LAC 1: %+v", r)
	}
	p.Confirmed(7, 2)
	if r = p.Ready(); len(r.Logged) != 1 || p.InFlight() != 0 {
		t.Fatalf("after LAC 2: %+v", r)
	}
}

func TestCloseLogsCoveredEntriesReportsUnusedAndRequeuesTheRestFirst(t *testing.T) {
	p := mustNew(t, Config{MaxBatchMessages: 1, MaxInFlight: 8})
	p.LedgerOpened(3)
	p.Add(msgs(1, 0, 4)...)
	r := p.Ready()
	ids := []uint64{r.GrantRequests[0].BatchID, r.GrantRequests[1].BatchID, r.GrantRequests[2].BatchID, r.GrantRequests[3].BatchID}
	_ = p.Granted(ids[0], 10)
	_ = p.Granted(ids[1], 11)
	_ = p.Granted(ids[2], 12)
	r = p.Ready()
	_ = p.Appended(ids[0], 1)
	_ = p.Appended(ids[1], 2)
	// ids[2] granted, never appended; ids[3] not granted yet.
	p.Add(msgs(1, 4, 1)...)
	p.LedgerFailing(3)
	if r = p.Ready(); len(r.GrantRequests) != 0 || len(r.Appends) != 0 {
		t.Fatalf("sealed or appended while failing: %+v", r)
	}
	p.LedgerClosed(3, 1) // entry 2 did not make it
	r = p.Ready()
	if len(r.Logged) != 1 || r.Logged[0].ID != ids[0] {
		t.Fatalf("logged %+v", r.Logged)
	}
	if len(r.Unused) != 1 || r.Unused[0].Span != (Span{12, 13}) {
		t.Fatalf("unused %+v", r.Unused)
	}
	if !r.NeedLedger {
		t.Fatal("no new ledger asked for")
	}
	// The late grant of the never-granted batch is Unused, not appended.
	_ = p.Granted(ids[3], 13)
	if r = p.Ready(); len(r.Unused) != 1 || r.Unused[0].Span != (Span{13, 14}) || len(r.Appends) != 0 {
		t.Fatalf("late grant: %+v", r)
	}
	p.LedgerOpened(4)
	r = p.Ready()
	var seqs []uint64
	for _, g := range r.GrantRequests {
		b := p.find(g.BatchID)
		seqs = append(seqs, b.Messages[0].Seq)
	}
	if len(seqs) != 4 || seqs[0] != 1 || seqs[1] != 2 || seqs[2] != 3 || seqs[3] != 4 {
		t.Fatalf("requeued in order 1,2,3 then 4; got %v", seqs)
	}
}

// TestRandomSchedules drives the pipeline against a model of ledgers and a
// sequencer with random grant delays, appends, confirmations and failures,
// and checks the write-path invariants after every schedule.
func TestRandomSchedules(t *testing.T) {
	seeds := 300
	if testing.Short() {
		seeds = 100
	}
	for seed := 0; seed < seeds; seed++ {
		runSchedule(t, uint64(seed))
	}
}

type modelLedger struct {
	id      uint64
	entries []*Batch // entries[i] is entry i+1 (entry 0: snapshot)
	lac     int64
	closed  bool
}

func runSchedule(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 7))
	p := mustNew(t, Config{MaxBatchMessages: 1 + rng.IntN(4), MaxInFlight: 1 + rng.IntN(5)})
	var nextOffset, nextLedger uint64 = 0, 1
	ledgers := map[uint64]*modelLedger{}
	var current *modelLedger
	var pendingGrants []GrantRequest
	var toAppend []*Batch
	logged := map[[2]uint64]uint64{} // (producer, seq) → offset
	unusedOffsets := map[uint64]bool{}
	appendedOffsets := map[uint64]bool{}
	nextSeq := map[uint64]uint64{}
	sent := 0

	drain := func() {
		r := p.Ready()
		if r.NeedLedger {
			current = &modelLedger{id: nextLedger, lac: 0}
			ledgers[current.id] = current
			nextLedger++
			p.LedgerOpened(current.id)
			r2 := p.Ready()
			r.GrantRequests = append(r.GrantRequests, r2.GrantRequests...)
		}
		pendingGrants = append(pendingGrants, r.GrantRequests...)
		toAppend = append(toAppend, r.Appends...)
		for _, u := range r.Unused {
			for o := u.Span.First; o < u.Span.End; o++ {
				if appendedOffsets[o] {
					t.Fatalf("seed %d: offset %d reported Unused after an AddEntry", seed, o)
				}
				unusedOffsets[o] = true
			}
		}
		for _, b := range r.Logged {
			for i, m := range b.Messages {
				key := [2]uint64{m.ProducerID, m.Seq}
				if _, dup := logged[key]; dup {
					t.Fatalf("seed %d: producer %d seq %d logged twice", seed, m.ProducerID, m.Seq)
				}
				logged[key] = b.First + uint64(i)
			}
		}
	}
	for step := 0; step < 400; step++ {
		switch rng.IntN(6) {
		case 0: // a producer sends
			producer := uint64(1 + rng.IntN(3))
			n := 1 + rng.IntN(3)
			p.Add(msgs(producer, nextSeq[producer], n)...)
			nextSeq[producer] += uint64(n)
			sent += n
		case 1: // the sequencer answers the oldest grant request
			if len(pendingGrants) > 0 {
				g := pendingGrants[0]
				pendingGrants = pendingGrants[1:]
				if err := p.Granted(g.BatchID, nextOffset); err != nil {
					t.Fatalf("seed %d: %v", seed, err)
				}
				nextOffset += uint64(g.Count)
			}
		case 2: // the owner appends what is ready
			for _, b := range toAppend {
				l := ledgers[b.Ledger]
				if l.closed {
					continue
				}
				l.entries = append(l.entries, b)
				for o := b.First; o < b.First+uint64(len(b.Messages)); o++ {
					appendedOffsets[o] = true
				}
				if err := p.Appended(b.ID, int64(len(l.entries))); err != nil {
					t.Fatalf("seed %d: %v", seed, err)
				}
			}
			toAppend = nil
		case 3: // the LAC advances
			if current != nil && !current.closed && current.lac < int64(len(current.entries)) {
				current.lac += 1 + rng.Int64N(int64(len(current.entries))-current.lac)
				p.Confirmed(current.id, current.lac)
			}
		case 4: // the ledger fails and closes somewhere between LAC and its end
			if current != nil && !current.closed && rng.IntN(4) == 0 {
				p.LedgerFailing(current.id)
				toAppend = nil
				last := current.lac + rng.Int64N(int64(len(current.entries))-current.lac+1)
				current.closed = true
				p.LedgerClosed(current.id, last)
				current = nil
			}
		}
		drain()
	}
	// Settle: answer every grant, append, confirm all, until quiet.
	for i := 0; i < 200 && len(logged) < sent; i++ {
		for _, g := range pendingGrants {
			_ = p.Granted(g.BatchID, nextOffset)
			nextOffset += uint64(g.Count)
		}
		pendingGrants = nil
		drain()
		for _, b := range toAppend {
			l := ledgers[b.Ledger]
			l.entries = append(l.entries, b)
			_ = p.Appended(b.ID, int64(len(l.entries)))
		}
		toAppend = nil
		if current != nil {
			current.lac = int64(len(current.entries))
			p.Confirmed(current.id, current.lac)
		}
		drain()
	}
	if len(logged) != sent {
		t.Fatalf("seed %d: %d of %d messages logged after settling", seed, len(logged), sent)
	}
	// Producer order: offsets increase with seq.
	for producer, n := range nextSeq {
		for seq := uint64(1); seq < n; seq++ {
			if logged[[2]uint64{producer, seq}] <= logged[[2]uint64{producer, seq - 1}] {
				t.Fatalf("seed %d: producer %d seq %d logged before seq %d", seed, producer, seq, seq-1)
			}
		}
	}
	for _, offset := range logged {
		if unusedOffsets[offset] {
			t.Fatalf("seed %d: offset %d both logged and Unused", seed, offset)
		}
	}
}

// Ack mode leader: batches the local store fsynced are acked early, in
// order and once; the quorum still decides Written and Logged, and a close
// below an early-acked batch re-grants it.
func TestLocallyDurableAcksEarlyAndTheQuorumStillDecides(t *testing.T) {
	p := mustNew(t, Config{MaxBatchMessages: 1, MaxInFlight: 8})
	p.LedgerOpened(5)
	p.Add(msgs(1, 0, 3)...)
	r := p.Ready()
	for i, g := range r.GrantRequests {
		if err := p.Granted(g.BatchID, uint64(100+i)); err != nil {
			t.Fatal(err)
		}
	}
	r = p.Ready()
	for i, b := range r.Appends {
		if err := p.Appended(b.ID, int64(i+1)); err != nil {
			t.Fatal(err)
		}
	}
	p.LocallyDurable(5, 2)
	r = p.Ready()
	if len(r.Acked) != 2 || r.Acked[0].First != 100 || r.Acked[1].First != 101 || len(r.Logged) != 0 || len(r.Written) != 0 {
		t.Fatalf("after local durable 2: %+v", r)
	}
	p.LocallyDurable(5, 2)
	p.LocallyDurable(4, 3) // another ledger: ignored
	if r = p.Ready(); len(r.Acked) != 0 {
		t.Fatalf("acked again or for another ledger: %+v", r.Acked)
	}
	p.Confirmed(5, 1)
	if r = p.Ready(); len(r.Logged) != 1 || len(r.Written) != 1 || len(r.Acked) != 0 {
		t.Fatalf("after LAC 1: %+v", r)
	}
	// The ledger closes at entry 1: the early-acked batch in entry 2 is not
	// logged there; its message is sealed again for the next ledger.
	p.LedgerFailing(5)
	p.LedgerClosed(5, 1)
	r = p.Ready()
	if len(r.Logged) != 0 || !r.NeedLedger || p.Waiting() != 2 {
		t.Fatalf("after close at 1: %+v, waiting %d", r, p.Waiting())
	}
	p.LedgerOpened(6)
	if r = p.Ready(); len(r.GrantRequests) != 2 || r.GrantRequests[0].Ledger != 6 {
		t.Fatalf("re-grants %+v", r.GrantRequests)
	}
}

// A sealed batch owns its messages: what the waiting queue does next (more
// adds, more seals) never shows through.
func TestSealedBatchOwnsItsMessages(t *testing.T) {
	p, err := New(Config{MaxBatchMessages: 2, MaxInFlight: 8})
	if err != nil {
		t.Fatal(err)
	}
	p.LedgerOpened(1)
	p.Add(Message{Seq: 0}, Message{Seq: 1}, Message{Seq: 2})
	p.Ready()
	p.Add(Message{Seq: 3}, Message{Seq: 4}, Message{Seq: 5})
	p.Ready()
	var got [][]uint64
	for _, b := range p.inFlight {
		var seqs []uint64
		for _, m := range b.Messages {
			seqs = append(seqs, m.Seq)
		}
		got = append(got, seqs)
	}
	want := [][]uint64{{0, 1}, {2}, {3, 4}, {5}}
	if fmt.Sprint(got) != fmt.Sprint(want) || p.Waiting() != 0 {
		t.Fatalf("batches %v with %d waiting, want %v with 0", got, p.Waiting(), want)
	}
}

// A batch whose grant was refused before its ledger closed is put back in
// the queue but kept as no orphan: no grant will come to remove it, and it
// would hold its messages for the node's lifetime.
func TestRefusedGrantLeavesNoOrphan(t *testing.T) {
	p, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	p.LedgerOpened(1)
	p.Add(Message{Seq: 0})
	r := p.Ready()
	if len(r.GrantRequests) != 1 {
		t.Fatalf("grant requests %+v", r.GrantRequests)
	}
	p.GrantRefused(r.GrantRequests[0].BatchID)
	p.LedgerFailing(1)
	p.LedgerClosed(1, -1)
	if len(p.orphans) != 0 || p.Waiting() != 1 {
		t.Fatalf("after the close: %d orphans, %d waiting", len(p.orphans), p.Waiting())
	}
}

// TestWantedLedgerIsAskedAgainAfterAFailedOpen: a ledger wanted with no
// message waiting (a producer's snapshot must be recorded) is asked for
// again when the open fails, until one opens. It was asked for once, and
// an InitProducer waiting on it hung until some other message came.
func TestWantedLedgerIsAskedAgainAfterAFailedOpen(t *testing.T) {
	p := mustNew(t, Config{})
	p.WantLedger()
	for attempt := range 3 {
		if r := p.Ready(); !r.NeedLedger {
			t.Fatalf("attempt %d: ledger not asked for: %+v", attempt, r)
		}
		if r := p.Ready(); r.NeedLedger {
			t.Fatalf("attempt %d: asked twice while opening", attempt)
		}
		p.LedgerOpenFailed()
	}
	p.Ready()
	p.LedgerOpened(4)
	p.LedgerFailing(4)
	p.LedgerClosed(4, -1)
	if r := p.Ready(); r.NeedLedger {
		t.Fatalf("asked again after one opened and nothing waits: %+v", r)
	}
}

// TestAbandonHandsEverythingBackAndLogsNothing: after Abandon nothing of
// what waited or was in flight is granted, appended or logged; the grant of
// a batch never appended is reported Unused when it comes, and no ledger is
// asked for.
func TestAbandonHandsEverythingBackAndLogsNothing(t *testing.T) {
	p := mustNew(t, Config{MaxBatchMessages: 2})
	p.LedgerOpened(1)
	p.Add(msgs(7, 0, 2)...) // batch 1: granted and appended
	r := p.Ready()
	if err := p.Granted(r.GrantRequests[0].BatchID, 100); err != nil {
		t.Fatal(err)
	}
	r = p.Ready()
	if err := p.Appended(r.Appends[0].ID, 1); err != nil {
		t.Fatal(err)
	}
	p.Add(msgs(7, 2, 2)...) // batch 2: asked for, not granted yet
	second := p.Ready().GrantRequests[0].BatchID
	p.Add(msgs(7, 4, 1)...) // waiting
	back := p.Abandon()
	if len(back) != 5 || back[0].Seq != 0 || back[4].Seq != 4 {
		t.Fatalf("handed back %+v, want seqs 0..4 in order", back)
	}
	if err := p.Granted(second, 102); err != nil {
		t.Fatal(err)
	}
	p.Confirmed(1, 1)
	r = p.Ready()
	if len(r.Logged) != 0 || len(r.Appends) != 0 || len(r.GrantRequests) != 0 || r.NeedLedger {
		t.Fatalf("after Abandon: %+v", r)
	}
	if len(r.Unused) != 1 || r.Unused[0].Span != (Span{102, 104}) {
		t.Fatalf("unused %+v, want [102,104)", r.Unused)
	}
}
