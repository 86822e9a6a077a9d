package ledger

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"
)

// The randomized protocol test: per seed, a schedule of faults (partitions
// of the writer from stores, store crashes and restarts, disk wipes that
// bring a store back as a new incarnation, a slow writer) plus dropped,
// delayed and reordered replies, with one or two recoveries racing the
// writer (and each other, and sometimes the writer's own close). The
// schedule is a function of the seed; goroutine interleavings are not
// controlled, so a failure prints its seed and schedule to replay.

type eventKind int

const (
	evPartition eventKind = iota // cut the writer from a slot
	evHeal                       // heal the writer's partition to a slot
	evCrash                      // crash a slot (it restarts at a later event)
	evRestart                    // restart a crashed slot with its disk
	evWipe                       // restart a slot with an empty disk: a new incarnation
	evPause                      // the writer stalls
)

func (k eventKind) String() string {
	return [...]string{"partition", "heal", "crash", "restart", "wipe", "pause"}[k]
}

type event struct {
	at    int // before append #at
	kind  eventKind
	slot  int
	pause time.Duration
}

type schedule struct {
	seed       uint64
	w, a, f    int
	entries    int
	recoverAt  int
	recoverers int
	// abandoned is how long a recoverer that dies midway (it stops at a
	// deadline, leaving the ledger recovering) runs; 0: none dies.
	abandoned              time.Duration
	writerClosesDuringRace bool
	dropRate, reorderRate  float64
	events                 []event
}

func (s schedule) String() string {
	out := fmt.Sprintf("seed=%d W=%d A=%d f=%d entries=%d recoverAt=%d recoverers=%d abandoned=%s writerClose=%v drop=%.2f reorder=%.1f events:",
		s.seed, s.w, s.a, s.f, s.entries, s.recoverAt, s.recoverers, s.abandoned, s.writerClosesDuringRace, s.dropRate, s.reorderRate)
	for _, e := range s.events {
		out += fmt.Sprintf(" %d:%s(%d)", e.at, e.kind, e.slot)
	}
	return out
}

func makeSchedule(seed uint64, short bool) schedule {
	rng := rand.New(rand.NewPCG(seed, 77))
	configs := [][3]int{{3, 2, 1}, {5, 3, 2}, {3, 3, 1}, {3, 2, 1}}
	cfg := configs[rng.IntN(len(configs))]
	s := schedule{seed: seed, w: cfg[0], a: cfg[1], f: cfg[2], entries: 150 + rng.IntN(250)}
	if short {
		s.entries = 60 + rng.IntN(100)
	}
	s.recoverAt = s.entries/3 + rng.IntN(s.entries/2)
	s.recoverers = 1 + rng.IntN(2)
	if rng.IntN(3) == 0 {
		s.abandoned = time.Duration(1+rng.IntN(30)) * time.Millisecond
	}
	s.writerClosesDuringRace = rng.IntN(3) == 0
	s.dropRate = []float64{0, 0.01, 0.02, 0.05}[rng.IntN(4)]
	s.reorderRate = []float64{0, 0.2, 0.5}[rng.IntN(3)]
	wipes := 0
	crashed := map[int]bool{}
	for at := 0; at < s.entries; at += 1 + rng.IntN(s.entries/6) {
		slot := rng.IntN(s.w)
		switch p := rng.IntN(10); {
		case p < 3:
			s.events = append(s.events, event{at: at, kind: evPartition, slot: slot})
			s.events = append(s.events, event{at: at + 1 + rng.IntN(s.entries/4), kind: evHeal, slot: slot})
		case p < 5 && !crashed[slot]:
			crashed[slot] = true
			s.events = append(s.events, event{at: at, kind: evCrash, slot: slot})
			s.events = append(s.events, event{at: at + 1 + rng.IntN(s.entries/4), kind: evRestart, slot: slot})
		case p < 6 && wipes < min(s.f, s.w-s.a) && !crashed[slot]:
			// A wiped store loses what it acked, so at most f wipes; and
			// recovery needs A live holders per entry, so at most W−A
			// (no ensemble changes: see TestRecoveryWaitsWhenAHoldersImpossible).
			wipes++
			s.events = append(s.events, event{at: at, kind: evWipe, slot: slot})
		default:
			s.events = append(s.events, event{at: at, kind: evPause, pause: time.Duration(1+rng.IntN(15)) * time.Millisecond})
		}
	}
	slices.SortStableFunc(s.events, func(x, y event) int { return x.at - y.at })
	return s
}

func soakFactor() int {
	if n, err := strconv.Atoi(os.Getenv("ORDERLOG_SOAK")); err == nil && n > 0 {
		return n
	}
	return 1
}

func TestRandomizedRecovery(t *testing.T) {
	seeds := 24
	if testing.Short() {
		seeds = 6
	}
	if n := soakFactor(); n > 1 {
		seeds = 6 * n // make soak: ORDERLOG_SOAK=50 runs 300 schedules (~5 min)
	}
	for seed := range uint64(seeds) {
		s := makeSchedule(seed, testing.Short())
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Logf("schedule %s", s)
			runSchedule(t, s)
		})
	}
}

// confirmLog records every LAC the writer reported.
type confirmLog struct {
	mu  sync.Mutex
	max int64
	all int
}

func (l *confirmLog) report(lac int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.max = max(l.max, lac)
	l.all++
}

func (l *confirmLog) highest() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.max
}

func runSchedule(t *testing.T, s schedule) {
	c := newTestCluster(t, s.w, s.seed)
	c.net.dropRate, c.net.delayRate, c.net.reorderRate, c.net.maxDelay = s.dropRate, 0.1, s.reorderRate, 3*time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	confirms := &confirmLog{max: -1}
	w := c.create(t, s.a, s.f, WriterOptions{
		MaxInFlight: 64, MaxFrameEntries: 16, UnreachableAfter: 300 * time.Millisecond, OnConfirm: confirms.report,
	})

	type outcome struct {
		who string
		m   Metadata
		err error
	}
	results := make(chan outcome, s.recoverers+1)
	var racers sync.WaitGroup
	startRace := func() {
		if s.abandoned > 0 {
			// This recoverer dies midway; the others must finish its work.
			go func() {
				dying, stop := context.WithTimeout(ctx, s.abandoned)
				defer stop()
				_, _ = Recover(dying, c.cli, w.ID(), RecoverOptions{Stores: c.net.dialer("recovery-dying"), CallTimeout: 500 * time.Millisecond})
			}()
		}
		for i := range s.recoverers {
			racers.Add(1)
			go func() {
				defer racers.Done()
				m, err := Recover(ctx, c.cli, w.ID(), RecoverOptions{Stores: c.net.dialer(fmt.Sprintf("recovery-%d", i)), CallTimeout: 500 * time.Millisecond})
				results <- outcome{fmt.Sprintf("recovery-%d", i), m, err}
			}()
		}
		if s.writerClosesDuringRace {
			racers.Add(1)
			go func() {
				defer racers.Done()
				m, err := w.Close(ctx)
				results <- outcome{"writer-close", m, err}
			}()
		}
	}

	events := s.events
	var appendErr error
	for i := 0; i <= s.entries; i++ {
		for len(events) > 0 && events[0].at <= i {
			applyEvent(t, c, events[0])
			events = events[1:]
		}
		if i == s.recoverAt {
			startRace()
		}
		if i == s.entries || appendErr != nil {
			continue
		}
		id, err := w.Append(payloadFor(w.ID(), int64(i)), spanFor(int64(i)))
		if err != nil {
			appendErr = err
			continue
		}
		if id != int64(i) {
			t.Fatalf("Append returned id %d for entry %d", id, i)
		}
	}
	for _, e := range events { // events scheduled past the end (restarts, heals)
		applyEvent(t, c, e)
	}
	for _, sl := range c.slots { // every crashed store comes back eventually
		if _, up := sl.client(); !up {
			sl.restart(t, false)
		}
	}
	for i := range s.w {
		c.net.partition("writer", c.slots[i].name, false)
	}
	racers.Wait()
	close(results)

	var agreed *Metadata
	for r := range results {
		if r.err != nil {
			t.Fatalf("%s: %v", r.who, r.err)
		}
		if agreed == nil {
			agreed = &r.m
		} else if r.m.LastEntry != agreed.LastEntry || r.m.ModRevision != agreed.ModRevision ||
			r.m.FirstOffset != agreed.FirstOffset || r.m.EndOffset != agreed.EndOffset {
			t.Fatalf("%s closed at %+v, another at %+v", r.who, r.m, *agreed)
		}
	}
	final := *agreed

	// The fenced writer keeps trying; it must never confirm past the end.
	if !s.writerClosesDuringRace {
		for i := int64(s.entries); i < int64(s.entries)+20; i++ {
			if _, err := w.Append(payloadFor(w.ID(), i), spanFor(i)); err != nil {
				break
			}
		}
		closed, err := w.Close(ctx)
		if err != nil {
			t.Fatalf("writer close after recovery: %v", err)
		}
		if closed.LastEntry != final.LastEntry || closed.ModRevision != final.ModRevision {
			t.Fatalf("writer's close returned %+v, recovery closed %+v", closed, final)
		}
	}
	if hi := confirms.highest(); hi > final.LastEntry {
		t.Fatalf("writer reported entry %d confirmed, closed ledger ends at %d", hi, final.LastEntry)
	}
	if lac := w.LAC(); lac > final.LastEntry {
		t.Fatalf("writer LAC %d beyond closed last %d", lac, final.LastEntry)
	}
	if v := c.net.violations(); len(v) > 0 {
		t.Fatalf("store answers contradicted acks:\n%v", v)
	}
	checkClosedLedger(t, ctx, c, final)

	// A late recovery agrees too.
	late, err := Recover(ctx, c.cli, w.ID(), RecoverOptions{Stores: c.net.dialer("late")})
	if err != nil || late.LastEntry != final.LastEntry {
		t.Fatalf("late recovery %+v, %v; closed at %d", late, err, final.LastEntry)
	}
	if v := c.net.violations(); len(v) > 0 {
		t.Fatalf("store answers contradicted acks:\n%v", v)
	}
	if appendErr != nil && !errors.Is(appendErr, ErrFenced) && !errors.Is(appendErr, ErrQuorumLost) && !errors.Is(appendErr, ErrClosed) {
		t.Fatalf("unexpected append error %v", appendErr)
	}
	t.Logf("closed at %d, writer confirmed up to %d", final.LastEntry, confirms.highest())
}

func applyEvent(t *testing.T, c *testCluster, e event) {
	sl := c.slots[e.slot]
	switch e.kind {
	case evPartition:
		c.net.partition("writer", sl.name, true)
	case evHeal:
		c.net.partition("writer", sl.name, false)
	case evCrash:
		sl.crash()
	case evRestart:
		if _, up := sl.client(); !up {
			sl.restart(t, false)
		}
	case evWipe:
		sl.restart(t, true)
	case evPause:
		time.Sleep(e.pause)
	}
}
