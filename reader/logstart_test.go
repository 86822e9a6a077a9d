package reader

import (
	"context"
	"sync"
	"testing"

	"orderlog/ingest/batch"
	"orderlog/ingest/retention"
	"orderlog/internal/apierr"
)

// startMovingEntries is memEntries that moves the reader's log start the
// first time an entry is read: retention moving it while a page is read.
type startMovingEntries struct {
	memEntries
	once  sync.Once
	r     *Reader
	start uint64
}

func (s *startMovingEntries) ReadEntry(ctx context.Context, ledger uint64, entry int64) ([]byte, error) {
	s.once.Do(func() {
		s.r.SetRetained(retention.Retained{End: s.start}) // retention moves both together
		s.r.SetLogStart(s.start)
	})
	return s.memEntries.ReadEntry(ctx, ledger, entry)
}

// TestAPageEndsWhereTheLogStartMovedPast: a read that started above the
// log start while retention moves it past the offsets the page has not
// reached yet ends the page there (found in review: the page went on at
// the trimmed map's first segment, a silent gap), and the next page from
// there answers OFFSET_OUT_OF_RANGE naming the new start.
func TestAPageEndsWhereTheLogStartMovedPast(t *testing.T) {
	const n = 300
	entries := &startMovingEntries{memEntries: memEntries{}, start: 200}
	commits := NewCommitMap()
	for i := range int64(n) {
		p, err := batch.Encode(nil, batch.Header{Kind: batch.KindRecords, FirstOffset: uint64(i), Count: 1, Runs: []batch.ProducerRun{{Count: 1}}},
			[]batch.Record{{Topic: "t", Value: []byte("v")}})
		if err != nil {
			t.Fatal(err)
		}
		entries.memEntries[i] = p
		must(t, commits.Resolve(1, Segment{First: uint64(i), End: uint64(i) + 1, Ledger: 1, Entry: i}))
	}
	must(t, commits.Advance(1, n))
	r := New(commits, entries)
	entries.r = r
	page, err := r.ReadPage(context.Background(), 0, n, Filter{})
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range page.Messages {
		if m.Offset != uint64(i) {
			t.Fatalf("message %d at offset %d: a gap", i, m.Offset)
		}
	}
	if page.NextOffset != uint64(len(page.Messages)) || page.NextOffset >= 200 {
		t.Fatalf("page of %d messages ends at %d", len(page.Messages), page.NextOffset)
	}
	_, err = r.ReadPage(context.Background(), page.NextOffset, n, Filter{})
	if e := apierr.As(err); e == nil || e.Code != apierr.OffsetOutOfRange || e.Details["log_start"] != "200" {
		t.Fatalf("the next page: %v", err)
	}
}

// TestANewStartWithoutItsRetainedSetIsUnavailable: a reader that learned
// a new log start before the retained set that reaches it (two watches)
// answers UNAVAILABLE below the start, not OFFSET_OUT_OF_RANGE (found in
// review: a consumer of a compacted topic was told to skip what is kept).
func TestANewStartWithoutItsRetainedSetIsUnavailable(t *testing.T) {
	commits := NewCommitMap()
	must(t, commits.Resolve(1, Segment{First: 0, End: 300, Hole: true}))
	must(t, commits.Advance(1, 300))
	r := New(commits, memEntries{})
	r.SetRetained(retention.Retained{End: 100, Ledgers: []retention.RetainedLedger{{ID: 9, First: 10, End: 11, Entries: 1}}})
	r.SetLogStart(200)
	_, err := r.ReadPage(context.Background(), 10, 10, Filter{})
	if e := apierr.As(err); e.Code != apierr.Unavailable {
		t.Fatalf("new start, old set: %v", err)
	}
	r.SetRetained(retention.Retained{End: 200})
	_, err = r.ReadPage(context.Background(), 10, 10, Filter{})
	if e := apierr.As(err); e.Code != apierr.OffsetOutOfRange || e.Details["log_start"] != "200" {
		t.Fatalf("new start, its (empty) set: %v", err)
	}
}
