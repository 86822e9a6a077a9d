package ledger

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	events "orderlog/internal/event"
	"orderlog/proto/walpb"
)

// RecoverOptions tune Recover.
type RecoverOptions struct {
	// Stores reaches the ensemble.
	Stores Dialer
	// CallTimeout bounds each store call. Default 1 s.
	CallTimeout time.Duration
	// Retry is the pause before asking again when an entry or the fence
	// cannot be decided yet. Default 20 ms.
	Retry time.Duration
	// NoOffsets says the ledger's entries carry no offsets (a sequencer's
	// commit ledger), so the closed record gets none without reading back
	// every entry in search of a span.
	NoOffsets bool
	// Events is told of the fence and of the recovery's outcome.
	Events events.Listener
}

func (o *RecoverOptions) fillDefaults() {
	if o.CallTimeout <= 0 {
		o.CallTimeout = time.Second
	}
	if o.Retry <= 0 {
		o.Retry = 20 * time.Millisecond
	}
	o.Events.EnsureDefaults()
}

// Recover closes someone else's ledger (its writer dead, slow or
// partitioned) exactly as DESIGN §4 says, and returns the closed metadata:
//
//  1. CAS open → recovering (a ledger already recovering is recovered again:
//     its recoverer may have died; a closed ledger is returned as is);
//  2. fence it on at least W−A+1 stores, after which the writer can never
//     again reach A acks;
//  3. walk upward from the highest LAC a fenced store reported: an entry
//     some store holds is rolled forward until A stores hold it; an entry
//     W−A+1 fenced stores answer ABSENT for ends the ledger; anything else
//     (UNKNOWN, no reply) is asked again, never concluded. Like the fence,
//     each step waits for the answers that decide it, not for a member that
//     missed the fence (paused, say): an entry only such a member holds was
//     never confirmed, and may be cut off;
//  4. CAS recovering → closed with the last entry and the covered offsets.
//     The first recovering → closed wins; a recovery that loses returns the
//     winner's metadata.
//
// If ctx ends first, Recover returns a *RecoveryIncompleteError and the
// ledger stays recovering; calling Recover again is safe.
//
// Once the ledger is recovering, Events.LedgerRecovered is told how the
// recovery ended (closed, closed elsewhere, failed); a ledger found closed
// already is reported as such.
func Recover(ctx context.Context, cli *clientv3.Client, id uint64, o RecoverOptions) (Metadata, error) {
	o.fillDefaults()
	m, err := Get(ctx, cli, id)
	if err != nil {
		return Metadata{}, err
	}
	start := time.Now()
	alreadyClosed := m.State == StateClosed
	m, _, err = transition(ctx, cli, m, StateOpen, func(m Metadata) Metadata {
		m.State = StateRecovering
		return m
	})
	if err != nil {
		return m, err // nothing changed: the caller retries
	}
	if m.State == StateClosed {
		outcome := events.RecoveryClosedElsewhere
		if alreadyClosed {
			outcome = events.RecoveryAlreadyClosed
		}
		o.Events.LedgerRecovered(recoveryInfo(m, outcome, start, nil))
		return m, nil
	}
	final, outcome, err := recoverFenceable(ctx, cli, m, o)
	o.Events.LedgerRecovered(recoveryInfo(final, outcome, start, err))
	if err != nil {
		return Metadata{}, err
	}
	return final, nil
}

// recoveryInfo is the event of a recovery of m that ended with outcome.
func recoveryInfo(m Metadata, outcome events.RecoveryOutcome, start time.Time, err error) events.RecoveryInfo {
	if err != nil {
		outcome = events.RecoveryFailed
	}
	return events.RecoveryInfo{Ledger: m.ID, Epoch: uint64(m.Epoch), Writer: m.WriterIncarnation, Outcome: outcome,
		Last: m.LastEntry, FirstOffset: m.FirstOffset, EndOffset: m.EndOffset, Duration: time.Since(start), Err: err}
}

// recoverFenceable runs steps 2–4 on m, which is recovering. On failure the
// metadata returned is m (for the event's ids).
func recoverFenceable(ctx context.Context, cli *clientv3.Client, m Metadata, o RecoverOptions) (Metadata, events.RecoveryOutcome, error) {
	clients, err := dialEnsemble(o.Stores, m.Ensemble)
	if err != nil {
		return m, events.RecoveryFailed, err
	}
	r := &recovery{cli: cli, meta: m, clients: clients, opts: o, copying: make([]atomic.Bool, len(clients))}
	last, err := r.run(ctx)
	if errors.Is(err, errClosedElsewhere) {
		return r.closed, events.RecoveryClosedElsewhere, nil
	}
	if err != nil {
		return m, events.RecoveryFailed, err
	}
	var first, end uint64
	if !o.NoOffsets {
		if first, end, err = r.offsetHull(ctx, last); err != nil {
			return m, events.RecoveryFailed, err
		}
	}
	final, swapped, err := transition(ctx, cli, m, StateRecovering, func(m Metadata) Metadata {
		m.State, m.LastEntry, m.FirstOffset, m.EndOffset = StateClosed, last, first, end
		m.ClosedAt = time.Now().UnixMilli() // Bytes stays 0, unknown: retention estimates it
		return m
	})
	if err != nil {
		return m, events.RecoveryFailed, err
	}
	outcome := events.RecoveryClosed
	if !swapped {
		outcome = events.RecoveryClosedElsewhere // the first recovering → closed was another actor's
	}
	closeOnStores(ctx, final, clients)
	return final, outcome, nil
}

// recovery is the I/O around decideFence and decideEntry.
type recovery struct {
	cli     *clientv3.Client
	meta    Metadata
	clients []walpb.WALClient
	opts    RecoverOptions
	// spans learned during the walk, for the offset hull.
	spans map[int64]Span
	// closed is the metadata another closer wrote while this recovery
	// waited (errClosedElsewhere).
	closed Metadata
	// fenced marks the stores that acknowledged this recovery's fence;
	// only their ABSENT answers count (decideEntry).
	fenced []bool
	// copying marks the members a roll-forward copy is still going to
	// (copies the walk did not wait for): one at a time per member.
	copying []atomic.Bool
	// lost marks the members lost for good (lost.go), as of lostAt.
	lost   []bool
	lostAt time.Time
	// rounds counts the reads of the entry being settled (callTimeout).
	rounds int
}

// errClosedElsewhere stops a recovery that finds, while waiting, that
// another recovery (or the writer) already closed the ledger: the stores may
// have dropped entries beyond that close, so this walk could never finish.
var errClosedElsewhere = errors.New("ledger: closed by another actor")

// run fences, walks, and returns the ledger's last entry.
func (r *recovery) run(ctx context.Context) (int64, error) {
	startAfter, err := r.fence(ctx)
	if err != nil {
		return 0, err
	}
	r.spans = make(map[int64]Span)
	r.refreshLost(ctx)
	for entry := startAfter + 1; ; {
		// Fast path: decide and roll forward a window of entries at once.
		next, ended, err := r.settleWindow(ctx, entry)
		if err != nil {
			return 0, err
		}
		if ended {
			return next - 1, nil
		}
		if next > entry {
			entry = next
			continue
		}
		// The window's first entry could not be settled from one round of
		// answers: ask again, entry by entry, until it is.
		done, err := r.settle(ctx, entry)
		if err != nil {
			return 0, err
		}
		if done {
			return entry - 1, nil
		}
		entry++
	}
}

// fence asks every store to fence until W−A+1 acknowledged.
func (r *recovery) fence(ctx context.Context) (int64, error) {
	answers := make([]fenceAnswer, len(r.clients))
	for {
		askAllGrace(len(r.clients),
			func(i int) bool { return answers[i].answer != answerNone }, // fenced already; a fence is durable before it is answered
			func(i int) fenceAnswer { return r.fenceOne(ctx, i, r.clients[i]) },
			func(i int, f fenceAnswer) bool {
				answers[i] = f
				fenced, _ := decideFence(answers, r.meta.W, r.meta.A)
				return fenced && slices.ContainsFunc(answers, func(a fenceAnswer) bool { return a.answer == answerPresent })
			},
			// Enough once the quorum is fenced and some member reported its
			// LAC (an UNKNOWN answer reports none); the others get
			// fenceGrace to report theirs too: the walk starts above the
			// highest, and an entry below it that cannot reach A holders
			// (W = A with a lost member) would hold it up. A member that
			// answers later still is fenced, but not waited for.
			fenceGrace)
		if ok, startAfter := decideFence(answers, r.meta.W, r.meta.A); ok {
			r.fenced = make([]bool, len(r.clients))
			var stores []string
			for i, f := range answers {
				r.fenced[i] = f.answer != answerNone
				if r.fenced[i] {
					stores = append(stores, r.meta.Ensemble[i].StoreID)
				}
			}
			r.opts.Events.LedgerFenced(events.FenceInfo{Ledger: r.meta.ID, Stores: stores, LAC: startAfter})
			return startAfter, nil
		}
		if err := r.pause(ctx); err != nil {
			return 0, r.incomplete(-1, "fence quorum not reached", err)
		}
	}
}

// fenceGrace is how long a fence that has its quorum waits for the other
// members' answers.
const fenceGrace = 100 * time.Millisecond

// fenceAbsentOnes fences the stores the fence quorum went without that
// answered ABSENT, so that their answers can count, and reports whether any
// is fenced now. (A store that answers is reachable, so this is quick; a
// store that does not answer is not waited for.)
func (r *recovery) fenceAbsentOnes(ctx context.Context, reads []entryRead) bool {
	var wg sync.WaitGroup
	var fencedNow atomic.Bool
	for i, c := range r.clients {
		if r.fenced[i] || reads[i].answer != answerAbsent {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r.fenceOne(ctx, i, c).answer != answerNone {
				r.fenced[i] = true // each goroutine writes its own element
				fencedNow.Store(true)
			}
		}()
	}
	wg.Wait()
	return fencedNow.Load()
}

func (r *recovery) fenceOne(ctx context.Context, i int, c walpb.WALClient) fenceAnswer {
	ctx, cancel := context.WithTimeout(ctx, r.opts.CallTimeout)
	defer cancel()
	resp, err := c.Fence(ctx, &walpb.FenceRequest{LedgerId: r.meta.ID, StoreIncarnation: r.meta.Ensemble[i].Incarnation})
	if err != nil {
		return fenceAnswer{answer: answerNone}
	}
	return fenceAnswer{answer: answerOf(resp.Status), lac: resp.Lac}
}

// settle decides one entry: it returns done=true when the entry is beyond
// the ledger's end, false once the entry is held by A stores.
func (r *recovery) settle(ctx context.Context, entry int64) (bool, error) {
	start, report := time.Now(), recoveryWaitReport
	defer func() { r.rounds = 0 }()
	for ; ; r.rounds++ {
		reads := r.readAll(ctx, entry)
		if waited := time.Since(start); waited >= report {
			report = 2 * waited
			r.opts.Events.RecoveryWaiting(events.RecoveryWaitInfo{Ledger: r.meta.ID, Entry: entry,
				Answers: r.describe(reads), Waited: waited})
		}
		verdict, holder := decideEntry(reads, r.fenced, r.meta.W, r.meta.A)
		if verdict == verdictWait && r.fenceAbsentOnes(ctx, reads) {
			continue // their ABSENT counts now: ask again at once
		}
		switch verdict {
		case verdictEnd:
			return true, nil
		case verdictConflict:
			return false, &RecoveryIncompleteError{LedgerID: r.meta.ID, Entry: entry, Reason: "stores hold different bytes", Err: ErrUnreadable}
		case verdictRollForward:
			r.spans[entry] = spanOf(reads[holder].span)
			copies := []*walpb.AddEntry{r.copyOf(entry, reads[holder])}
			if r.rollForward(ctx, entry, [][]entryRead{reads}, copies) == 1 {
				return false, nil
			}
		}
		if err := r.pause(ctx); err != nil {
			return false, r.incomplete(entry, "neither A holders nor W-A+1 ABSENT", err)
		}
		r.refreshLost(ctx)
	}
}

// recoveryWaitReport is how long a recovery waits on one entry before it
// says so (and again each time the wait doubles).
const recoveryWaitReport = 2 * time.Second

// describe names each member's answer, for RecoveryWaiting.
func (r *recovery) describe(reads []entryRead) []string {
	names := map[answer]string{answerNone: "no reply", answerPresent: "PRESENT", answerAbsent: "ABSENT", answerUnknown: "UNKNOWN"}
	out := make([]string, len(reads))
	for i, rd := range reads {
		out[i] = r.meta.Ensemble[i].StoreID + "=" + names[rd.answer]
		if r.fenced[i] {
			out[i] += " fenced"
		}
		if i < len(r.lost) && r.lost[i] {
			out[i] += " lost"
		}
	}
	return out
}

// readAll reads entry from every member. It stops waiting for members
// that missed the fence once the fenced ones have answered and their
// answers decide the entry.
func (r *recovery) readAll(ctx context.Context, entry int64) []entryRead {
	reads := make([]entryRead, len(r.clients))
	timeouts := r.callTimeouts() // read here: the calls may outlive this round
	askAll(len(r.clients), nil, func(i int) entryRead {
		cctx, cancel := context.WithTimeout(ctx, timeouts[i])
		defer cancel()
		resp, err := r.clients[i].ReadEntry(cctx, &walpb.ReadEntryRequest{
			LedgerId: r.meta.ID, StoreIncarnation: r.meta.Ensemble[i].Incarnation, EntryId: entry,
		})
		if err != nil || resp.EntryId != entry && resp.Status == walpb.EntryStatus_PRESENT {
			return entryRead{}
		}
		return entryRead{answer: answerOf(resp.Status), span: resp.Span, payload: resp.Payload}
	}, decidedByFenced(r, func(i int, rd entryRead) []entryRead {
		reads[i] = rd
		return reads
	}))
	return reads
}

// decidedByFenced returns a take for askAll that records each member's
// answer with record (which returns the answers so far for the entry to
// decide) and says enough once every fenced member has answered and those
// answers decide the entry: an unfenced member cannot change a decision
// made without it (its ABSENT does not count, and a holder is there
// already).
func decidedByFenced[T any](r *recovery, record func(i int, v T) []entryRead) func(int, T) bool {
	answered := make([]bool, len(r.clients))
	return func(i int, v T) bool {
		reads := record(i, v)
		answered[i] = true
		for j, f := range r.fenced {
			if f && !answered[j] {
				return false
			}
		}
		verdict, _ := decideEntry(reads, r.fenced, r.meta.W, r.meta.A)
		return verdict != verdictWait
	}
}

// reader reads entries up to bound (all decided) from the ensemble, from
// the members that took the fence first (fenced, a copy of r.fenced: the
// reader may be used off the walk's goroutine): one that missed it is
// likely paused or down.
func (r *recovery) reader(bound int64, fenced []bool) *Reader {
	silent := &SilentStores{}
	for i, f := range fenced {
		if !f {
			silent.note(r.meta.Ensemble[i].StoreID)
		}
	}
	o := ReaderOptions{CallTimeout: r.opts.CallTimeout, Retry: r.opts.Retry, Silent: silent}
	o.fillDefaults()
	return &Reader{meta: r.meta, clients: r.clients, bound: bound, opts: o}
}

// pause waits before asking the stores again, and checks that nobody
// closed the ledger meanwhile.
func (r *recovery) pause(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(r.opts.Retry):
	}
	m, err := Get(ctx, r.cli, r.meta.ID)
	if err == nil && m.State == StateClosed {
		r.closed = m
		return errClosedElsewhere
	}
	return nil
}

func (r *recovery) incomplete(entry int64, reason string, err error) error {
	if errors.Is(err, errClosedElsewhere) {
		return err
	}
	return &RecoveryIncompleteError{LedgerID: r.meta.ID, Entry: entry, Reason: reason, Err: err}
}

// offsetHull finds the covered offset range of entries 0..last: the first
// entry's non-empty span from below and the last one from above. Spans of
// entries the walk saw are known; the rest are read with reader fallback.
func (r *recovery) offsetHull(ctx context.Context, last int64) (first, end uint64, err error) {
	rd := r.reader(last, r.fenced)
	span := func(id int64) (Span, error) {
		if s, ok := r.spans[id]; ok {
			return s, nil
		}
		e, err := rd.Read(ctx, id)
		if err != nil {
			return Span{}, fmt.Errorf("recovery of ledger %d: span of entry %d: %w", r.meta.ID, id, err)
		}
		return e.Span, nil
	}
	top := int64(-1)
	for id := last; id >= 0; id-- {
		s, err := span(id)
		if err != nil {
			return 0, 0, err
		}
		if !s.Empty() {
			end, top = s.End, id
			break
		}
	}
	for id := int64(0); id <= top; id++ {
		s, err := span(id)
		if err != nil {
			return 0, 0, err
		}
		if !s.Empty() {
			return s.First, end, nil
		}
	}
	return 0, 0, nil
}
