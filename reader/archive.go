package reader

import (
	"context"

	"google.golang.org/protobuf/proto"

	"orderlog/internal/apierr"
	"orderlog/proto/orderlogpb"
)

// Below the log start, with an archive (tiering), a read is served from
// the archive: the same messages, holes and paging as the hot log served
// before retention deleted its ledgers (docs/design.md §8). The archive
// reaches the log start: retention never moves the start past the
// archived watermark T.

// ArchiveSource serves the archived offsets (tiering.ArchiveReader).
type ArchiveSource interface {
	// Archived is [first, t): the offsets the archive holds.
	Archived() (first, t uint64)
	// Scan visits, in offset order from `from` on and below to, each
	// archived message and each hole (a skipped range clipped to [from,
	// to)) until visit returns false, and returns the first offset it did
	// not visit. hint's topic and key let it skip files and row groups
	// that hold no match; it may still visit messages that do not match.
	Scan(ctx context.Context, from, to uint64, hint Filter, visit func(m *orderlogpb.StoredMessage, hole *orderlogpb.SkippedRange) bool) (uint64, error)
}

// SetArchive makes reads below the log start come from a.
func (r *Reader) SetArchive(a ArchiveSource) { r.archive.Store(&a) }

// archiveCovers reports whether the archive holds offset.
func (r *Reader) archiveCovers(offset uint64) bool {
	a := r.archive.Load()
	if a == nil {
		return false
	}
	first, t := (*a).Archived()
	return first <= offset && offset < t
}

// archivedPageRows bounds the messages a filtered page examines in the
// archive, as PageSegments bounds the hot log's entries: a query that
// matches little ends its page there.
const archivedPageRows = 64 << 10

// readArchived fills a page from the archive, from `from` up to the log
// start at most.
func (r *Reader) readArchived(ctx context.Context, a ArchiveSource, from, start uint64, page *orderlogpb.ReadResponse, budget *pageBudget, filter Filter) error {
	_, t := a.Archived()
	to := min(start, t)
	examined := 0
	next, err := a.Scan(ctx, from, to, filter, func(m *orderlogpb.StoredMessage, hole *orderlogpb.SkippedRange) bool {
		if hole != nil {
			page.Skipped = append(page.Skipped, hole)
			return true
		}
		if budget.full(page) || examined >= archivedPageRows {
			return false
		}
		examined++
		rec := m.Message
		if !filter.matches(rec.GetTopic(), rec.GetKey(), m.IngestTimeUs) {
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
	})
	if err != nil {
		return apierr.New(apierr.Unavailable, "read the archive at %d: %v", from, err)
	}
	page.NextOffset = next
	return nil
}
