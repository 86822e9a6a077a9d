package reader

import (
	"context"
	"testing"
	"time"

	"orderlog/ingest/batch"
)

// TestATopicsOwnRetentionHidesItsOlderMessages: messages of a topic whose
// retention_ms passed read as skipped with reason "retention" in an
// unfiltered read and are left out of a read filtered by that topic; the
// other topics' messages in the same entries are served.
func TestATopicsOwnRetentionHidesItsOlderMessages(t *testing.T) {
	old := time.Now().Add(-2 * time.Hour).UnixMicro()
	p, err := batch.Encode(nil, batch.Header{Kind: batch.KindRecords, FirstOffset: 0, Count: 4, IngestTimeMicros: old,
		Runs: []batch.ProducerRun{{Count: 4}}},
		[]batch.Record{{Topic: "short", Value: []byte("a")}, {Topic: "short", Value: []byte("b")}, {Topic: "long", Value: []byte("c")}, {Topic: "short", Value: []byte("d")}})
	if err != nil {
		t.Fatal(err)
	}
	commits := NewCommitMap()
	must(t, commits.Resolve(1, Segment{First: 0, End: 4, Ledger: 1, Entry: 0}))
	must(t, commits.Advance(1, 4))
	r := New(commits, memEntries{0: p})
	r.SetTopicRetention(map[string]time.Duration{"short": time.Hour, "long": 3 * time.Hour})
	page, err := r.ReadPage(context.Background(), 0, 10, Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Messages) != 1 || page.Messages[0].Offset != 2 || len(page.Skipped) != 2 ||
		page.Skipped[0].First != 0 || page.Skipped[0].End != 2 || page.Skipped[0].Reason != SkipRetention ||
		page.Skipped[1].First != 3 || page.Skipped[1].End != 4 || page.NextOffset != 4 {
		t.Fatalf("page %+v", page)
	}
	page, err = r.ReadPage(context.Background(), 0, 10, Filter{Topic: "short"})
	if err != nil || len(page.Messages) != 0 || len(page.Skipped) != 0 || page.NextOffset != 4 {
		t.Fatalf("filtered page %+v, %v", page, err)
	}
}
