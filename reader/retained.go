package reader

import (
	"context"
	"sort"
	"strconv"
	"sync"

	"orderlog/ingest/retention"
	"orderlog/internal/apierr"
	"orderlog/proto/orderlogpb"
)

// Below the log start only the retained set is left (ingest/retention):
// the latest message of each key of a compacted topic and the messages of
// topics kept longer, at their offsets. A read there serves them, and the
// offsets between them as skipped ranges with reason "compacted"; a read
// below the set's first message (or below the start with no set) answers
// OFFSET_OUT_OF_RANGE naming where reading can start.

// SkipCompacted is the reason of a skipped range below the log start.
const SkipCompacted = "compacted"

// retainedSet is the reader's view of the retained set, with the indexes
// of its ledgers loaded so far.
type retainedSet struct {
	mu      sync.Mutex
	set     retention.Retained
	indexes map[uint64][]retention.IndexSpan
}

// SetRetained installs the retained set retention switched to.
func (r *Reader) SetRetained(set retention.Retained) {
	r.retained.mu.Lock()
	defer r.retained.mu.Unlock()
	if set.End < r.retained.set.End {
		return // an older pointer than the one installed
	}
	r.retained.set = set
	kept := make(map[uint64][]retention.IndexSpan)
	for _, l := range set.Ledgers {
		if spans, ok := r.retained.indexes[l.ID]; ok {
			kept[l.ID] = spans
		}
	}
	r.retained.indexes = kept
}

func (r *Reader) retainedSnapshot() retention.Retained {
	r.retained.mu.Lock()
	defer r.retained.mu.Unlock()
	return r.retained.set
}

// ReadStart is the first offset a read may start at: the lowest of the
// log start, the archive's first offset and the retained set's first
// message (the set below the archive's first offset, the archive above).
func (r *Reader) ReadStart() uint64 {
	start := r.LogStart()
	first := start
	if span := r.archiveSpan(); span.Known {
		first = min(first, span.First)
	}
	if set := r.retainedSnapshot(); len(set.Ledgers) > 0 && set.End >= start {
		first = min(first, set.Ledgers[0].First)
	}
	return first
}

// checkStart refuses a read from below where reading can start. Below the
// log start (and the archive's first offset) it needs the retained set
// that reaches it: retention switches both in one transaction, but the
// reader learns them by two watches, and with the new start and the old
// set it cannot tell (UNAVAILABLE, retry).
func (r *Reader) checkStart(from uint64) error {
	start := r.LogStart()
	if span := r.archiveSpan(); from >= start || span.Known && from >= span.First {
		return nil
	}
	if set := r.retainedSnapshot(); set.End < start {
		return apierr.New(apierr.Unavailable, "offset %d is below the log start %d and the reader has not loaded what is kept there yet: retry", from, start)
	}
	if first := r.ReadStart(); from < first {
		return apierr.New(apierr.OffsetOutOfRange, "offset %d is below the log start %d: older messages were deleted by retention", from, first).
			With("log_start", strconv.FormatUint(first, 10))
	}
	return nil
}

// readRetained fills a page from the retained set, from `from` up to end
// at most (the log start, or the archive's first offset below it); the
// next page goes on from NextOffset. It returns the segments examined.
func (r *Reader) readRetained(ctx context.Context, from, end uint64, page *orderlogpb.ReadResponse, budget *pageBudget, filter Filter) (int, error) {
	set := r.retainedSnapshot()
	if start := r.LogStart(); set.End < start {
		return 0, apierr.New(apierr.Unavailable, "the retained set below the log start %d is being switched: retry", start)
	}
	start := end // the set is read up to end, and what it leaves there is compacted
	cursor := from
	examined := 0
	for examined < PageSegments && !budget.full(page) && cursor < start {
		seg, ok, err := r.retainedSegmentAt(ctx, set, cursor, start)
		if err != nil {
			return 0, err
		}
		examined++
		if !ok || seg.First >= start {
			page.Skipped = append(page.Skipped, &orderlogpb.SkippedRange{First: cursor, End: start, Reason: SkipCompacted})
			cursor = start
			break
		}
		if seg.First > cursor {
			page.Skipped = append(page.Skipped, &orderlogpb.SkippedRange{First: cursor, End: seg.First, Reason: SkipCompacted})
		}
		if cursor, err = r.appendSegment(ctx, page, seg, max(cursor, seg.First), min(seg.End, start), budget, filter); err != nil {
			return 0, err
		}
	}
	page.NextOffset = cursor
	return examined, nil
}

// retainedSegmentAt is the set's first entry ending above offset (false if
// none below start).
func (r *Reader) retainedSegmentAt(ctx context.Context, set retention.Retained, offset, start uint64) (Segment, bool, error) {
	for _, l := range set.Ledgers {
		if l.End <= offset || l.Entries == 0 {
			continue
		}
		if l.First >= start {
			return Segment{}, false, nil
		}
		spans, err := r.retainedIndex(ctx, l)
		if err != nil {
			return Segment{}, false, err
		}
		i := sort.Search(len(spans), func(i int) bool { return spans[i].End > offset })
		if i < len(spans) {
			return Segment{First: spans[i].First, End: spans[i].End, Ledger: l.ID, Entry: int64(i)}, true, nil
		}
	}
	return Segment{}, false, nil
}

// retainedIndex loads a retained ledger's index entry (once).
func (r *Reader) retainedIndex(ctx context.Context, l retention.RetainedLedger) ([]retention.IndexSpan, error) {
	r.retained.mu.Lock()
	spans, ok := r.retained.indexes[l.ID]
	r.retained.mu.Unlock()
	if ok {
		return spans, nil
	}
	payload, err := r.entries.ReadEntry(ctx, l.ID, l.Entries)
	if err != nil {
		return nil, apierr.New(apierr.Unavailable, "read retained ledger %d's index: %v", l.ID, err)
	}
	if spans, err = retention.DecodeIndex(payload); err != nil || int64(len(spans)) != l.Entries {
		return nil, &apierr.Error{Code: apierr.Internal, Message: "retained ledger " + strconv.FormatUint(l.ID, 10) + ": bad index"}
	}
	r.retained.mu.Lock()
	if r.retained.indexes == nil {
		r.retained.indexes = make(map[uint64][]retention.IndexSpan)
	}
	r.retained.indexes[l.ID] = spans
	r.retained.mu.Unlock()
	return spans, nil
}
