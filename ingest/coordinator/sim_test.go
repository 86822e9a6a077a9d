package coordinator

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
)

var simSeed = flag.Uint64("sim.seed", 0, "run only this seed of the ingest simulation, with its trace")

// simAction is one thing that can happen next; run reports whether it did
// anything.
type simAction struct {
	weight int
	run    func() bool
}

// actions lists what can happen at this step; with clients false the
// clients stay quiet and nothing fails (the run is draining).
func (w *simWorld) actions(clients bool) []simAction {
	var actions []simAction
	add := func(weight int, run func() bool) { actions = append(actions, simAction{weight, run}) }
	if clients {
		for _, c := range w.clients {
			add(30, func() bool { return c.act(w) })
		}
		add(10, func() bool { return w.keyed.act(w) })
	}
	for _, n := range w.nodes {
		if !n.alive {
			add(10, func() bool { w.startNode(n); return true })
			continue
		}
		add(40, func() bool { return w.takeFrame(n) })
		add(40, func() bool { return w.answerGrant(n) })
		add(30, func() bool { return w.deliver(n) })
		add(40, func() bool { return w.confirm(n) })
		add(10, func() bool { return w.checkWriter(n) })
		if !clients {
			continue
		}
		add(2, func() bool { // the writer lost its quorum, or the sequencer asks for a close
			id, ok := w.anyWriter(n)
			if !ok {
				return false
			}
			w.logf("%s: L%d fails", n.incarnation, id)
			n.m.LedgerFailed(id)
			return true
		})
		add(3, func() bool { // the open ledger reached its size or age
			if !n.m.Roll("size") {
				return false
			}
			w.logf("%s: roll of L%d", n.incarnation, n.m.Ledger())
			w.stats.rolls++
			return true
		})
		if other := w.nodes[1-n.slot]; other.alive {
			add(1, func() bool { w.crash(n); return true })
		}
	}
	return actions
}

// deliver hands the node one of its slow operations' answers, any of them.
func (w *simWorld) deliver(n *simNode) bool {
	if len(n.pending) == 0 {
		return false
	}
	i := w.rng.IntN(len(n.pending))
	e := n.pending[i]
	n.pending = slices.Delete(n.pending, i, i+1)
	w.logf("%s: %s", e.incarnation, e.name)
	e.fn(e.incarnation == n.incarnation)
	return true
}

// randomStep runs one action chosen by weight among those that can act.
func (w *simWorld) randomStep(clients bool) bool {
	actions := w.actions(clients)
	for len(actions) > 0 {
		total := 0
		for _, a := range actions {
			total += a.weight
		}
		pick := w.rng.IntN(total)
		i := 0
		for ; pick >= actions[i].weight; i++ {
			pick -= actions[i].weight
		}
		if actions[i].run() {
			w.drive()
			return true
		}
		actions = slices.Delete(actions, i, i+1)
	}
	return false
}

// run plays steps random steps, lets the world settle, recovers every
// ledger left open and checks the end state.
func (w *simWorld) run(steps int) {
	for w.step = 1; w.step <= steps; w.step++ {
		w.randomStep(true)
	}
	for settle := 0; w.randomStep(false); settle++ {
		w.step++
		if settle > 20_000 {
			w.fatalf("the world did not settle")
		}
	}
	for _, c := range w.clients {
		if w.nodes[c.node].alive && (c.initPending || c.inFlight > 0) {
			w.fatalf("%s: the world settled with its InitProducer pending (%v) or %d frames unanswered", c.name, c.initPending, c.inFlight)
		}
	}
	if w.nodes[w.keyed.node].alive && w.keyed.inFlight > 0 {
		w.fatalf("the world settled with %d keyed or at-least-once frames unanswered", w.keyed.inFlight)
	}
	for _, id := range w.ledgerIDs() {
		w.recover(w.ledger.all[id])
	}
	for _, c := range w.clients {
		if w.check.ackedThrough[c.id] > w.check.durableNext[c.id] {
			w.fatalf("%s: seqs below %d acknowledged, below %d durable", c.name, w.check.ackedThrough[c.id], w.check.durableNext[c.id])
		}
	}
}

func soakFactor() int {
	if n, err := strconv.Atoi(os.Getenv("ORDERLOG_SOAK")); err == nil && n > 0 {
		return n
	}
	return 1
}

// TestSimulation runs the seeded simulation: 2,000 seeds (times
// ORDERLOG_SOAK in make soak; 200 with -short), or the one given with
// -sim.seed, whose trace is then printed.
func TestSimulation(t *testing.T) {
	const steps = 300
	if *simSeed != 0 {
		w := newSimWorld(t, *simSeed)
		defer func() {
			for _, line := range w.trace {
				t.Log(line)
			}
		}()
		w.run(steps)
		return
	}
	seeds := 2000 * soakFactor()
	if testing.Short() { // the race detector's run: the plain run covers the seeds
		seeds = 200
	}
	var total simStats
	for seed := 1; seed <= seeds; seed++ {
		w := newSimWorld(t, uint64(seed))
		w.run(steps)
		total.acked += w.stats.acked
		total.refusals += w.stats.refusals
		total.crashes += w.stats.crashes
		total.takeovers += w.stats.takeovers
		total.closes += w.stats.closes
		total.appendFailures += w.stats.appendFailures
		total.leaseLosses += w.stats.leaseLosses
		total.moves += w.stats.moves
		total.released += w.stats.released
		total.rolls += w.stats.rolls
		total.advances += w.stats.advances
	}
	t.Logf("%d seeds: %+v", seeds, total)
	// A schedule that never crashes or closes tests little: make sure the
	// weights still produce every kind of trouble.
	if total.acked < uint64(seeds)*20 || total.crashes < uint64(seeds) || total.takeovers < uint64(seeds)*5 ||
		total.closes < uint64(seeds)*2 || total.appendFailures < uint64(seeds)/10 || total.refusals < uint64(seeds) ||
		total.leaseLosses < uint64(seeds)/2 || total.moves < uint64(seeds) || total.released < uint64(seeds)/2 ||
		total.rolls < uint64(seeds) || total.advances < uint64(seeds) {
		t.Fatalf("weak schedules: %+v", total)
	}
}

// failureRecorder stops a simulation at its first failure and keeps the
// message, so a test can run a failing seed and look at how it failed.
type failureRecorder struct {
	testing.TB
	failure string
}

type simStopped struct{}

func (r *failureRecorder) Helper() {}

func (r *failureRecorder) Fatalf(format string, args ...any) {
	r.failure = fmt.Sprintf(format, args...)
	panic(simStopped{})
}

// runUntilFailure runs seed with recoveries that lose a confirmed entry and
// returns the failure message ("" if the checker found nothing).
func runUntilFailure(t *testing.T, seed uint64) (failure string) {
	recorder := &failureRecorder{TB: t}
	w := newSimWorld(recorder, seed)
	w.brokenRecovery = true
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(simStopped); !ok {
				panic(r)
			}
			failure = recorder.failure
		}
	}()
	w.run(300)
	return ""
}

// TestFailingSeedReplaysIdentically breaks the simulated storage (a
// recovery loses the last confirmed entry) and runs a seed that catches it
// twice: it must fail at the same step with the same message, trace
// included.
func TestFailingSeedReplaysIdentically(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		first := runUntilFailure(t, seed)
		if first == "" {
			continue
		}
		if second := runUntilFailure(t, seed); second != first {
			t.Fatalf("seed %d failed differently:\n%s\n---\n%s", seed, first, second)
		}
		t.Logf("seed %d fails the same way twice: %s", seed, first[:strings.Index(first+"\n", "\n")])
		return
	}
	t.Fatal("no seed of 20 caught recoveries that lose confirmed entries")
}

// TestSimulationSeedReplaysExactly runs seeds twice and compares their
// traces step by step: a failing seed must replay exactly.
func TestSimulationSeedReplaysExactly(t *testing.T) {
	for _, seed := range []uint64{7, 1234} {
		first, second := newSimWorld(t, seed), newSimWorld(t, seed)
		first.run(300)
		second.run(300)
		if len(first.trace) < 300 {
			t.Fatalf("seed %d: a trace of %d lines is too short to mean anything", seed, len(first.trace))
		}
		if !slices.Equal(first.trace, second.trace) {
			for i := range min(len(first.trace), len(second.trace)) {
				if first.trace[i] != second.trace[i] {
					t.Fatalf("seed %d differs at line %d:\n  %s\n  %s", seed, i, first.trace[i], second.trace[i])
				}
			}
			t.Fatalf("seed %d: traces of %d and %d lines", seed, len(first.trace), len(second.trace))
		}
	}
}
