package reader

import (
	"context"
	"errors"

	"google.golang.org/protobuf/proto"

	"orderlog/internal/apierr"
	"orderlog/proto/orderlogpb"
)

// Below the log start, with an archive (tiering), a read is served from
// the archive: the same messages, holes and paging as the hot log served
// before retention deleted its ledgers (docs/design.md §8). The archive
// reaches the log start: retention never moves the start past the
// archived watermark T. Below the archive's first offset (where it began:
// the log start then) only the retained set is left, read as without an
// archive.

// ArchiveSource serves the archived offsets (tiering.ArchiveReader).
type ArchiveSource interface {
	// Span is what the archive holds, as far as the source has loaded it.
	Span() ArchiveSpan
	// Scan visits, in offset order from `from` on and below to, each
	// archived message the hint may select, each hole (a skipped range
	// clipped to [from, to)) and each range it ruled out without visiting
	// its messages, until visit returns false, and returns the first
	// offset it did not visit. hint's topic and key let it skip files,
	// row groups and rows that hold no match; it may still visit messages
	// that do not match.
	Scan(ctx context.Context, from, to uint64, hint Filter, visit func(ArchiveItem) bool) (uint64, error)
}

// ArchiveSpan is an archive's extent as its source knows it.
type ArchiveSpan struct {
	// Known: the archive has a head. Before, nothing is archived and
	// reads below the log start go to the retained set.
	Known bool
	// First is the archive's first offset; [First, Loaded) is readable.
	// Loaded is at most T, and below it while the source loads the
	// manifest (reads in [Loaded, T) answer UNAVAILABLE: retry).
	First, Loaded uint64
}

// ArchiveItem is one step of a Scan: a message, a hole, or (neither set)
// the offsets [PrunedFirst, PrunedEnd), which hold no hole and no message
// the hint selects.
type ArchiveItem struct {
	Message                *orderlogpb.StoredMessage
	Hole                   *orderlogpb.SkippedRange
	PrunedFirst, PrunedEnd uint64
	// Examined: the pruned messages were looked at (their topic and key)
	// to rule them out; otherwise statistics, dictionaries, bloom filters
	// or a page index did, unread.
	Examined bool
}

// SetArchive makes reads below the log start come from a.
func (r *Reader) SetArchive(a ArchiveSource) { r.archive.Store(&a) }

// archiveSpan is the archive's span; not Known without an archive.
func (r *Reader) archiveSpan() ArchiveSpan {
	a := r.archive.Load()
	if a == nil {
		return ArchiveSpan{}
	}
	return (*a).Span()
}

// readBelowStart fills a page below the log start: from the archive where
// it begins at or below `from`, else from the retained set, up to where
// the archive begins. It returns the segments the page examined.
func (r *Reader) readBelowStart(ctx context.Context, from, start uint64, page *orderlogpb.ReadResponse, budget *pageBudget, filter Filter) (int, error) {
	span := r.archiveSpan()
	switch {
	case !span.Known || from < span.First:
		end := start
		if span.Known {
			end = min(start, span.First)
		}
		return r.readRetained(ctx, from, end, page, budget, filter)
	case from < span.Loaded:
		return r.readArchived(ctx, *r.archive.Load(), from, min(start, span.Loaded), page, budget, filter)
	}
	return 0, apierr.New(apierr.Unavailable, "offset %d is archived, but this reader has loaded the archive's manifest up to %d only: retry", from, span.Loaded)
}

// archivedRowsPerSegment is what a page counts for a hole of the archive,
// in messages examined, and the most it counts for a pruned range:
// PageSegments bounds the hot log's entries and holes, and an entry holds
// a producer's frame (64 messages by default), so a page examines about
// as much either way.
const archivedRowsPerSegment = 64

// archivedPageRows bounds the messages a page examines in the archive,
// holes and pruned ranges counted as above.
const archivedPageRows = PageSegments * archivedRowsPerSegment

// readArchived fills a page from the archive, from `from` up to `to`.
// The page is cut as a hot page is: at limit messages, at PageBytes, or
// after PageSegments' worth of messages, holes and pruned ranges examined.
// It returns that worth in segments.
func (r *Reader) readArchived(ctx context.Context, a ArchiveSource, from, to uint64, page *orderlogpb.ReadResponse, budget *pageBudget, filter Filter) (int, error) {
	examined := 0
	next, err := a.Scan(ctx, from, to, filter, func(item ArchiveItem) bool {
		if budget.full(page) || examined >= archivedPageRows {
			return false
		}
		switch m := item.Message; {
		case item.Hole != nil:
			examined += archivedRowsPerSegment
			page.Skipped = append(page.Skipped, item.Hole)
		case m == nil && item.Examined: // as the messages a hot page filters out
			examined += int(min(item.PrunedEnd-item.PrunedFirst, archivedPageRows))
		case m == nil: // ruled out unread: as its messages, up to a segment's worth
			examined += int(min(item.PrunedEnd-item.PrunedFirst, archivedRowsPerSegment))
		default:
			examined++
			return r.appendArchived(page, budget, filter, m)
		}
		return true
	})
	var apiErr *apierr.Error
	if errors.As(err, &apiErr) {
		return 0, apiErr // the source's own code (an archive key the node lacks: INTERNAL)
	}
	if err != nil {
		return 0, apierr.New(apierr.Unavailable, "read the archive at %d: %v", from, err)
	}
	page.NextOffset = next
	return (examined + archivedRowsPerSegment - 1) / archivedRowsPerSegment, nil
}

// appendArchived adds m to the page if it matches and fits (as
// appendSegment adds a hot message), and reports whether it fitted.
func (r *Reader) appendArchived(page *orderlogpb.ReadResponse, budget *pageBudget, filter Filter, m *orderlogpb.StoredMessage) bool {
	rec := m.Message
	if !filter.matches(rec.GetTopic(), rec.GetKey(), m.IngestTimeUs, m.ProducerId) {
		return true
	}
	if !filter.IncludeHidden && r.topics.expired(rec.GetTopic(), m.Offset, m.IngestTimeUs) {
		if filter.selectsAll() {
			skipExpired(page, m.Offset)
		}
		return true
	}
	if !budget.take(page, proto.Size(m)) {
		return false
	}
	page.Messages = append(page.Messages, m)
	return true
}
