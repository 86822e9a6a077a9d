package retention

import (
	"math"
	"slices"
	"testing"
	"time"

	"orderlog/ingest/ledger"
)

var planNow = time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)

// closed is a closed ledger of writer holding [first, end), closed ago
// before planNow, with bytes counted by its writer.
func closed(id uint64, writer string, first, end uint64, ago time.Duration, bytes int64) ledger.Metadata {
	return ledger.Metadata{ID: id, WriterIncarnation: writer, State: ledger.StateClosed, FirstOffset: first, EndOffset: end,
		ClosedAt: planNow.Add(-ago).UnixMilli(), Bytes: bytes}
}

func checkpointLedger(m ledger.Metadata) ledger.Metadata {
	m.Kind = ledger.KindCheckpoint
	return m
}

func idleIngest(m ledger.Metadata) ledger.Metadata {
	m.Kind = ledger.KindIngest
	return m
}

func ids(ms []ledger.Metadata) []uint64 {
	var out []uint64
	for _, m := range ms {
		out = append(out, m.ID)
	}
	return out
}

func TestPlan(t *testing.T) {
	// Two nodes' ledgers interleave in offset space; the sequencer's commit
	// ledger (no offsets) is among them.
	history := []ledger.Metadata{
		closed(1, "a", 0, 100, 5*time.Hour, 100_000),
		closed(2, "b", 50, 300, 4*time.Hour, 250_000),
		closed(3, "sequencer-n1", 0, 0, 4*time.Hour, 0),
		closed(4, "a", 0, 0, 3*time.Hour, 0), // a's rolled ledger that held only snapshots
		closed(5, "a", 300, 600, 2*time.Hour, 300_000),
		closed(6, "b", 600, 900, time.Hour, 0), // closed by a recovery: bytes estimated
		{ID: 7, WriterIncarnation: "a", State: ledger.StateOpen, LastEntry: -1},
		idleIngest(closed(8, "c", 0, 0, 3*time.Hour, 0)),                              // an idle node's rolled ledger: snapshots only
		checkpointLedger(closed(9, "sequencer-n1-checkpoint", 0, 0, 3*time.Hour, 0)),  // named by no checkpoint
		checkpointLedger(closed(10, "sequencer-n1-checkpoint", 0, 0, 3*time.Hour, 0)), // the pointer's first
		checkpointLedger(closed(11, "sequencer-n1-checkpoint", 0, 0, 3*time.Hour, 0)), // the pointer's own
	}
	cases := map[string]struct {
		policy     Policy
		committed  uint64
		start      uint64
		pinned     []uint64
		deleting   []uint64
		wantStart  uint64
		wantDelete []uint64
	}{
		"nothing_kept_by_any_measure": {committed: 900, wantStart: 0, wantDelete: []uint64{8, 9}},
		"age_3h": {policy: Policy{Age: 3*time.Hour + time.Minute}, committed: 900,
			// ledgers 1 and 2 closed over 3 h ago: start = 300; a's snapshot
			// ledger 4 precedes none of a's ledgers below 300 but ledger 1.
			wantStart: 300, wantDelete: []uint64{1, 2, 8, 9}},
		"age_90m": {policy: Policy{Age: 90 * time.Minute}, committed: 900,
			wantStart: 600, wantDelete: []uint64{1, 2, 4, 5, 8, 9}},
		"bytes": {policy: Policy{Bytes: 600_000}, committed: 900,
			// 100k+250k+300k+300k(estimated: 1,000 bytes an offset) = 950k;
			// dropping 1 and 2 leaves 600k.
			wantStart: 300, wantDelete: []uint64{1, 2, 8, 9}},
		"never_past_committed": {policy: Policy{Age: time.Minute}, committed: 450,
			wantStart: 450, wantDelete: []uint64{1, 2, 8, 9}},
		"never_back": {policy: Policy{Age: 3*time.Hour + time.Minute}, committed: 900, start: 350,
			wantStart: 350, wantDelete: []uint64{1, 2, 8, 9}},
		"pinned_and_marked_stay": {policy: Policy{Age: 90 * time.Minute}, committed: 900, pinned: []uint64{5}, deleting: []uint64{1},
			wantStart: 600, wantDelete: []uint64{2, 4, 8, 9}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			in := Input{Ledgers: history, Committed: tc.committed, Start: tc.start, Now: planNow,
				Pinned: map[uint64]bool{}, Deleting: map[uint64]bool{}, DeleteUpTo: math.MaxUint64,
				CheckpointLedger: 11, CheckpointFirst: 10}
			for _, id := range tc.pinned {
				in.Pinned[id] = true
			}
			for _, id := range tc.deleting {
				in.Deleting[id] = true
			}
			got := Plan(in, tc.policy)
			if got.Start != tc.wantStart || !slices.Equal(ids(got.Delete), tc.wantDelete) {
				t.Fatalf("start %d delete %v, want %d %v", got.Start, ids(got.Delete), tc.wantStart, tc.wantDelete)
			}
		})
	}
}

func TestPinsAndOrphans(t *testing.T) {
	ledgers := []ledger.Metadata{
		closed(1, "a", 0, 100, 10*24*time.Hour, 1),
		closed(2, "a", 100, 200, 9*24*time.Hour, 1),
		closed(3, "b", 200, 300, time.Hour, 1),
		closed(4, "a", 300, 400, 8*24*time.Hour, 1),
	}
	producers := []Producer{
		{ID: 1, Owner: "a", StateLedger: 2},                  // a is dead: pins 2 and 4
		{ID: 2, Owner: "b", StateLedger: 3, OwnerLive: true}, // pins 3
		{ID: 3, Owner: "a", StateLedger: 1, Expired: true},   // pins nothing
	}
	pins := Pins(producers, ledgers)
	if want := map[uint64]bool{2: true, 3: true, 4: true}; len(pins) != len(want) || !pins[2] || !pins[3] || !pins[4] {
		t.Fatalf("pins %v", pins)
	}
	week := 7 * 24 * time.Hour
	if got := Orphans(producers, ledgers, 400, week, planNow); len(got) != 1 || got[0].ID != 1 {
		t.Fatalf("orphans at start 400: %+v", got)
	}
	if got := Orphans(producers, ledgers, 350, week, planNow); len(got) != 0 {
		t.Fatalf("ledger 4 is not all below the start yet: %+v", got)
	}
	if got := Orphans(producers, ledgers, 400, 9*24*time.Hour, planNow); len(got) != 0 {
		t.Fatalf("ledger 4 closed 8 days ago, within a 9-day expiry: %+v", got)
	}
}

// With an archive the log start never passes the archived watermark,
// whatever the policy asks.
func TestPlanStopsAtTheArchivedWatermark(t *testing.T) {
	ledgers := []ledger.Metadata{closed(1, "n1", 0, 100, time.Hour, 1000), closed(2, "n1", 100, 200, time.Hour, 1000)}
	base := Input{Ledgers: ledgers, Committed: 200, Now: planNow, DeleteUpTo: math.MaxUint64}
	for _, tc := range []struct {
		ceiling uint64
		capped  bool
		want    uint64
	}{{0, false, 200}, {150, true, 150}, {0, true, 0}, {500, true, 200}} {
		in := base
		in.Ceiling, in.Capped = tc.ceiling, tc.capped
		if got := Plan(in, Policy{Age: time.Minute}).Start; got != tc.want {
			t.Errorf("ceiling %d capped %v: start %d, want %d", tc.ceiling, tc.capped, got, tc.want)
		}
	}
}
