package reader

import (
	"context"
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	"orderlog/ingest/batch"
	"orderlog/ingest/retention"
	"orderlog/internal/apierr"
	"orderlog/proto/orderlogpb"
)

// fakeArchive is an ArchiveSource over messages in memory: offsets of
// [span.First, span.Loaded) without a message are holes.
type fakeArchive struct {
	span     ArchiveSpan
	messages map[uint64]*orderlogpb.StoredMessage
}

func (a *fakeArchive) Span() ArchiveSpan { return a.span }

func (a *fakeArchive) Scan(_ context.Context, from, to uint64, _ Filter, visit func(ArchiveItem) bool) (uint64, error) {
	for o := from; o < to; {
		if m, ok := a.messages[o]; ok {
			if !visit(ArchiveItem{Message: m}) {
				return o, nil
			}
			o++
			continue
		}
		end := o + 1
		for end < to && a.messages[end] == nil {
			end++
		}
		if !visit(ArchiveItem{Hole: &orderlogpb.SkippedRange{First: o, End: end}}) {
			return o, nil
		}
		o = end
	}
	return to, nil
}

// ledgerEntries is an EntrySource over entries of several ledgers.
type ledgerEntries map[[2]int64][]byte

func (l ledgerEntries) ReadEntry(_ context.Context, ledger uint64, entry int64) ([]byte, error) {
	if p, ok := l[[2]int64{int64(ledger), entry}]; ok {
		return p, nil
	}
	return nil, fmt.Errorf("no entry %d of ledger %d", entry, ledger)
}

func oneRecordEntry(t *testing.T, offset uint64, topic string) []byte {
	t.Helper()
	p, err := batch.Encode(nil, batch.Header{Kind: batch.KindRecords, FirstOffset: offset, Count: 1, Runs: []batch.ProducerRun{{Count: 1}}},
		[]batch.Record{{Topic: topic, Key: []byte("k"), Value: fmt.Appendf(nil, "v%d", offset)}})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// belowTheArchive is a log whose start is 300, an archive from 100 holding
// every offset up to 300 but the hole [200, 210), and a retained set that
// kept the messages at 10 and 150 (the latter inside the archive, which
// serves it whole instead).
func belowTheArchive(t *testing.T, span ArchiveSpan) (*Reader, *fakeArchive) {
	t.Helper()
	const start = 300
	entries := ledgerEntries{
		{9, 0}: oneRecordEntry(t, 10, "compacted"),
		{9, 1}: oneRecordEntry(t, 150, "compacted"),
		{9, 2}: retention.EncodeIndex([]retention.IndexSpan{{First: 10, End: 11}, {First: 150, End: 151}}),
	}
	commits := NewCommitMap()
	must(t, commits.Resolve(1, Segment{First: 0, End: start + 10, Hole: true}))
	must(t, commits.Advance(1, start+10))
	r := New(commits, entries)
	r.SetRetained(retention.Retained{End: start, Ledgers: []retention.RetainedLedger{{ID: 9, First: 10, End: 151, Entries: 2}}})
	r.SetLogStart(start)
	archive := &fakeArchive{span: span, messages: map[uint64]*orderlogpb.StoredMessage{}}
	for o := uint64(100); o < start; o++ {
		if o < 200 || o >= 210 {
			archive.messages[o] = &orderlogpb.StoredMessage{Offset: o, Message: &orderlogpb.Message{Topic: "archived", Value: []byte("a")}}
		}
	}
	r.SetArchive(archive)
	return r, archive
}

// TestTheRetainedSetIsReadBelowTheArchive: with an archive that began at
// 100, the retained set below 100 is still read (found in review: reads
// started at the archive's first offset, and the retained set below it
// was unreadable), up to 100 and not past it; the archive serves from
// there, the retained set's copy of 150 unused.
func TestTheRetainedSetIsReadBelowTheArchive(t *testing.T) {
	r, _ := belowTheArchive(t, ArchiveSpan{Known: true, First: 100, Loaded: 300})
	if got := r.ReadStart(); got != 10 {
		t.Fatalf("ReadStart = %d, want 10 (the retained set's first message)", got)
	}
	var offsets []uint64
	var skipped []string
	for _, p := range readAll(t, r, 10, Filter{}) {
		for _, m := range p.Messages {
			offsets = append(offsets, m.Offset)
			if want := map[bool]string{true: "compacted", false: "archived"}[m.Offset < 100]; m.Message.Topic != want {
				t.Fatalf("offset %d from topic %q, want %q", m.Offset, m.Message.Topic, want)
			}
		}
		for _, s := range p.Skipped {
			skipped = append(skipped, fmt.Sprintf("[%d,%d)%s", s.First, s.End, s.Reason))
		}
	}
	if len(offsets) != 1+190 || offsets[0] != 10 || offsets[1] != 100 || offsets[len(offsets)-1] != 299 {
		t.Fatalf("read %d messages: %v...", len(offsets), offsets[:min(3, len(offsets))])
	}
	if fmt.Sprint(skipped) != "[[11,100)compacted [200,210) [300,310)]" {
		t.Fatalf("skipped %v", skipped)
	}
	if _, err := r.ReadPage(context.Background(), 5, 10, Filter{}); apierr.As(err).Code != apierr.OffsetOutOfRange {
		t.Fatalf("below the retained set: %v, want OFFSET_OUT_OF_RANGE", err)
	}
}

// TestAnArchiveNotLoadedYetIsUnavailable: a reader that has the archive's
// head but not yet the manifest up to the log start answers UNAVAILABLE
// there (found in review: it served the retained set's compacted view of
// offsets the archive holds whole); below the archive the retained set
// is read as before, and before the archive has a head everything below
// the start is the retained set's.
func TestAnArchiveNotLoadedYetIsUnavailable(t *testing.T) {
	r, archive := belowTheArchive(t, ArchiveSpan{Known: true, First: 100, Loaded: 150})
	ctx := context.Background()
	if _, err := r.ReadPage(ctx, 160, 10, Filter{}); apierr.As(err).Code != apierr.Unavailable {
		t.Fatalf("read above what is loaded: %v, want UNAVAILABLE", err)
	}
	page, err := r.ReadPage(ctx, 120, 1000, Filter{})
	if err != nil || len(page.Messages) != 30 || page.NextOffset != 150 {
		t.Fatalf("read of what is loaded: %d messages to %d, %v", len(page.Messages), page.NextOffset, err)
	}
	page, err = r.ReadPage(ctx, 10, 1000, Filter{})
	if err != nil || len(page.Messages) != 1 || page.NextOffset != 100 {
		t.Fatalf("read below the archive: %d messages to %d, %v", len(page.Messages), page.NextOffset, err)
	}
	archive.span = ArchiveSpan{}
	page, err = r.ReadPage(ctx, 10, 1000, Filter{})
	if err != nil || len(page.Messages) != 2 || page.NextOffset != 310 {
		t.Fatalf("read before the archive's head: %d messages to %d, %v", len(page.Messages), page.NextOffset, err)
	}
}

// alternating returns hot and archived readers of the same log: n offsets,
// odd ones holes, even ones one-message entries of topic "a".
func alternating(t *testing.T, n uint64) (hot, archived *Reader) {
	t.Helper()
	entries := memEntries{}
	hotMap, coldMap := NewCommitMap(), NewCommitMap()
	archive := &fakeArchive{span: ArchiveSpan{Known: true, First: 0, Loaded: n}, messages: map[uint64]*orderlogpb.StoredMessage{}}
	for o := uint64(0); o < n; o++ {
		if o%2 == 1 {
			must(t, hotMap.Resolve(1, Segment{First: o, End: o + 1, Hole: true}))
			continue
		}
		entries[int64(o)] = oneRecordEntry(t, o, "a")
		must(t, hotMap.Resolve(1, Segment{First: o, End: o + 1, Ledger: 1, Entry: int64(o)}))
		archive.messages[o] = &orderlogpb.StoredMessage{Offset: o, Message: &orderlogpb.Message{Topic: "a", Key: []byte("k"), Value: fmt.Appendf(nil, "v%d", o)}}
	}
	must(t, hotMap.Resolve(1, Segment{First: n, End: n + 1, Hole: true}))
	must(t, hotMap.Advance(1, n+1))
	must(t, coldMap.Resolve(1, Segment{First: 0, End: n + 1, Hole: true}))
	must(t, coldMap.Advance(1, n+1))
	hot, archived = New(hotMap, entries), New(coldMap, memEntries{})
	archived.SetRetained(retention.Retained{End: n})
	archived.SetLogStart(n)
	archived.SetArchive(archive)
	return hot, archived
}

// TestArchivedPagesAreCutAsHotPages: a page from the archive ends where
// the hot page of the same log ends, its holes counted as the hot page
// counts them (found in review: a full page still took the holes after
// its last message, and a page of holes had no bound).
func TestArchivedPagesAreCutAsHotPages(t *testing.T) {
	const n = 200
	hot, archived := alternating(t, n)
	for _, limit := range []int{1, 2, 7, 1000} {
		hot.PageMessages, archived.PageMessages = limit, limit
		hotPages, coldPages := readAll(t, hot, 0, Filter{}), readAll(t, archived, 0, Filter{})
		if len(hotPages) != len(coldPages) {
			t.Fatalf("limit %d: %d pages hot, %d from the archive", limit, len(hotPages), len(coldPages))
		}
		for i := range hotPages {
			h, c := hotPages[i], coldPages[i]
			h.Committed, c.Committed = 0, 0
			if !proto.Equal(h, c) {
				t.Fatalf("limit %d, page %d: hot %d messages, %v, next %d; archive %d messages, %v, next %d", limit, i,
					len(h.Messages), h.Skipped, h.NextOffset, len(c.Messages), c.Skipped, c.NextOffset)
			}
		}
	}
	// A filter nothing matches: a page examines a bounded stretch, its
	// holes at most PageSegments skipped ranges, as a hot page.
	_, archived = alternating(t, 5000)
	page, err := archived.ReadPage(context.Background(), 0, 1000, Filter{Topic: "none"})
	if err != nil || len(page.Skipped) > PageSegments || page.NextOffset >= 5000 {
		t.Fatalf("filtered page: %d skipped ranges, next %d, %v", len(page.Skipped), page.NextOffset, err)
	}
}

// movingArchive is a fakeArchive whose first Scan moves the log start to
// C, as retention may while a page is read.
type movingArchive struct {
	*fakeArchive
	r  *Reader
	to uint64
}

func (a *movingArchive) Scan(ctx context.Context, from, to uint64, hint Filter, visit func(ArchiveItem) bool) (uint64, error) {
	a.r.SetRetained(retention.Retained{End: a.to})
	a.r.SetLogStart(a.to)
	return a.fakeArchive.Scan(ctx, from, to, hint, visit)
}

// TestAPageFromTheArchiveEndsWhereTheStartMovedPast: a page read from the
// archive up to the log start goes on in the hot log; when retention moved
// the start past it meanwhile (the map trimmed up to C), the page ends
// there rather than fail (found by the node's archive test: "nothing
// decides offset").
func TestAPageFromTheArchiveEndsWhereTheStartMovedPast(t *testing.T) {
	r, archive := belowTheArchive(t, ArchiveSpan{Known: true, First: 100, Loaded: 300})
	r.SetArchive(&movingArchive{fakeArchive: archive, r: r, to: 310})
	page, err := r.ReadPage(context.Background(), 250, 1000, Filter{})
	if err != nil || len(page.Messages) != 50 || page.NextOffset != 300 {
		t.Fatalf("page: %d messages to %d, %v", len(page.Messages), page.NextOffset, err)
	}
}
