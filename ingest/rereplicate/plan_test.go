package rereplicate

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"orderlog/ingest/ledger"
)

// TestPlanCountsOnlyCurrentCopies: which members of a closed W=3 ledger
// still count as copies, by what the registrations say.
func TestPlanCountsOnlyCurrentCopies(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m := ledger.Metadata{W: 3, IntendedW: 3, A: 2, State: ledger.StateClosed, Ensemble: []ledger.Member{
		{StoreID: "s1", Incarnation: 1, Address: "h1"}, {StoreID: "s2", Incarnation: 2, Address: "h2"}, {StoreID: "s3", Incarnation: 3, Address: "h3"}}}
	all := map[string]ledger.Member{"s1": m.Ensemble[0], "s2": m.Ensemble[1], "s3": m.Ensemble[2]}
	without := func(id string, add ...ledger.Member) map[string]ledger.Member {
		out := map[string]ledger.Member{}
		for k, v := range all {
			if k != id {
				out[k] = v
			}
		}
		for _, a := range add {
			out[a.StoreID] = a
		}
		return out
	}
	cases := map[string]struct {
		registered map[string]ledger.Member
		goneFor    time.Duration
		partial    string
		keep, need int
		sources    int
	}{
		"all_current":         {registered: all, keep: 3, sources: 3},
		"new_incarnation":     {registered: without("s3", ledger.Member{StoreID: "s3", Incarnation: 9, Address: "h3"}), keep: 2, need: 1, sources: 2},
		"replaced_at_address": {registered: without("s3", ledger.Member{StoreID: "s9", Incarnation: 9, Address: "h3"}), keep: 2, need: 1, sources: 2},
		"gone_within_grace":   {registered: without("s3"), goneFor: 59 * time.Second, keep: 3, sources: 2},
		"gone_beyond_grace":   {registered: without("s3"), goneFor: time.Minute, keep: 2, need: 1, sources: 2},
		"moved_address":       {registered: without("s3", ledger.Member{StoreID: "s3", Incarnation: 3, Address: "h7"}), keep: 3, sources: 3},
		"missing_the_tail":    {registered: all, partial: "s3", keep: 2, need: 1, sources: 2},
	}
	for name, tc := range cases {
		l := liveness{registered: tc.registered, goneSince: map[string]time.Time{"s3": now.Add(-tc.goneFor)}, now: now, grace: time.Minute}
		d := plan(m, l, map[string]bool{tc.partial: tc.partial != ""})
		if len(d.keep) != tc.keep || d.need != tc.need || len(d.sources) != tc.sources || len(d.lost)+len(d.partial) != 3-tc.keep {
			t.Errorf("%s: keep %d need %d sources %d lost %d; want keep %d need %d sources %d", name,
				len(d.keep), d.need, len(d.sources), len(d.lost), tc.keep, tc.need, tc.sources)
		}
	}
}

// TestTargetsLeastLoadedFirst: copies go to registered stores outside the
// kept members, members that lack entries first, then the least loaded.
func TestTargetsLeastLoadedFirst(t *testing.T) {
	keep := []ledger.Member{{StoreID: "a"}}
	registered := map[string]ledger.Member{"a": {StoreID: "a"}, "b": {StoreID: "b"}, "c": {StoreID: "c"}, "d": {StoreID: "d"}}
	load := map[string]int{"a": 1, "b": 5, "c": 2, "d": 2}
	got := targets(decision{keep: keep}, registered, load, 2)
	if len(got) != 2 || got[0].StoreID != "c" || got[1].StoreID != "d" {
		t.Fatalf("targets %+v", got)
	}
	got = targets(decision{keep: keep, partial: []ledger.Member{{StoreID: "b"}}}, registered, load, 2)
	if len(got) != 2 || got[0].StoreID != "b" || got[1].StoreID != "c" {
		t.Fatalf("targets with a partial member %+v", got)
	}
}

// TestOrphansAreOnlyCopiesOfAChangeThatCertainlyFailed: after an ensemble
// change whose answer was lost nothing is deleted (it may have happened);
// after one refused for a newer ensemble, only copies on stores in
// neither ensemble are.
func TestOrphansAreOnlyCopiesOfAChangeThatCertainlyFailed(t *testing.T) {
	m := func(id string) ledger.Member { return ledger.Member{StoreID: id, Incarnation: 1} }
	before := []ledger.Member{m("a"), m("b"), m("c")}
	copied := []ledger.Member{m("b"), m("d"), m("e")} // b filled up in place
	if got := orphans(context.Canceled, copied, before, nil); got != nil {
		t.Fatalf("lost answer: orphans %v, want none", got)
	}
	current := []ledger.Member{m("a"), m("b"), m("e")} // another change copied to e
	got := orphans(fmt.Errorf("cas: %w", ledger.ErrEnsembleChanged), copied, before, current)
	if !slices.Equal(got, []ledger.Member{m("d")}) {
		t.Fatalf("refused change: orphans %v, want only d", got)
	}
}
