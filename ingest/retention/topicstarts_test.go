package retention

import (
	"maps"
	"testing"
	"time"

	"orderlog/ingest/batch"
	"orderlog/ingest/ledger"
)

func withTopics(m ledger.Metadata, topics map[string]int64) ledger.Metadata {
	m.TopicBytes = topics
	return m
}

func TestNextTopicStarts(t *testing.T) {
	retainedSet := withTopics(closed(9, "retention/w", 0, 90, time.Hour, 300), map[string]int64{"a": 300})
	retainedSet.Kind = ledger.KindRetained
	oldSet := withTopics(closed(8, "retention/w", 0, 80, time.Hour, 900), map[string]int64{"a": 900})
	oldSet.Kind = ledger.KindRetained
	ledgers := []ledger.Metadata{
		withTopics(closed(1, "n1", 0, 100, time.Hour, 1000), map[string]int64{"a": 600, "b": 400}), // below the start
		withTopics(closed(3, "n1", 100, 200, time.Hour, 1000), map[string]int64{"a": 500, "b": 500}),
		withTopics(closed(4, "n2", 150, 250, time.Hour, 1000), map[string]int64{"b": 1000}), // another writer's, overlapping
		withTopics(closed(5, "n1", 200, 300, time.Hour, 1000), map[string]int64{"a": 400, "c": 600}),
		{ID: 6, State: ledger.StateOpen, FirstOffset: 300}, // open: not counted yet
		closed(7, "n1", 300, 400, time.Hour, 1000),         // closed by a recovery: nothing counted
		retainedSet, oldSet,
	}
	retained := map[uint64]bool{9: true} // 8 is the previous set
	for _, tc := range []struct {
		name    string
		current TopicStarts
		limits  map[string]int64
		want    TopicStarts
	}{
		// a: 300 (set) + 500 (L3) + 400 (L5) = 1200 counted; the set goes
		// (900 left), then L3 (400 left).
		{"a within 500", nil, map[string]int64{"a": 500}, TopicStarts{"a": 200}},
		{"a within 1000", nil, map[string]int64{"a": 1000}, TopicStarts{"a": 90}},
		{"a within all it holds", nil, map[string]int64{"a": 1200}, TopicStarts{}},
		// b: L3 (500) ends first, then L4 (1000).
		{"b within 1000", nil, map[string]int64{"b": 1000}, TopicStarts{"b": 200}},
		{"b within 999", nil, map[string]int64{"b": 999}, TopicStarts{"b": 250}},
		{"no limit", nil, map[string]int64{"a": 0}, TopicStarts{}},
		{"never backwards", TopicStarts{"a": 250, "z": 7}, map[string]int64{"a": 500}, TopicStarts{"a": 250, "z": 7}},
		{"c over its only ledger", nil, map[string]int64{"c": 100}, TopicStarts{"c": 300}},
	} {
		got := NextTopicStarts(tc.current, tc.limits, ledgers, 100, retained)
		if !maps.Equal(got, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}

// A compacted or kept topic's retained messages below its start are
// dropped at the set's rebuild.
func TestCompactDropsWhatATopicsStartHides(t *testing.T) {
	now := planNow
	var kept []Kept
	for _, off := range []uint64{10, 20, 30} {
		kept = append(kept, Kept{Offset: off, IngestTimeMicros: now.UnixMicro(), Record: batch.Record{Topic: "a", Value: []byte("v")}})
	}
	got := Compact(kept, nil, map[string]TopicPolicy{"a": {Retention: -1, Bytes: 1, Start: 20}}, now)
	if len(got) != 2 || got[0].Offset != 20 || got[1].Offset != 30 {
		t.Fatalf("kept %v, want offsets 20 and 30", got)
	}
}
