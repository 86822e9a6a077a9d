package reader

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"orderlog/ingest/batch"
	"orderlog/internal/apierr"
	"orderlog/proto/orderlogpb"

	"google.golang.org/protobuf/proto"
)

// Filter selects messages for Query; the zero Filter selects everything.
type Filter struct {
	Topic          string
	Key            []byte
	FromTimeMicros int64 // ingest time, inclusive; 0 = no bound
	ToTimeMicros   int64 // ingest time, exclusive; 0 = no bound
	// IncludeHidden reads the messages a topic's retention hides too (the
	// archive keeps every message; reads of it hide them again).
	IncludeHidden bool
}

// selectsAll reports whether f is the zero Filter.
func (f Filter) selectsAll() bool {
	return f.Topic == "" && f.Key == nil && f.FromTimeMicros == 0 && f.ToTimeMicros == 0
}

func (f Filter) matches(topic string, key []byte, ingestTime int64) bool {
	return (f.Topic == "" || f.Topic == topic) &&
		(f.Key == nil || bytes.Equal(f.Key, key)) &&
		(f.FromTimeMicros == 0 || ingestTime >= f.FromTimeMicros) &&
		(f.ToTimeMicros == 0 || ingestTime < f.ToTimeMicros)
}

// Reader serves reads from a commit map and an entry source.
type Reader struct {
	commits  *CommitMap
	entries  EntrySource
	start    logStart
	retained retainedSet
	topics   topicRetention
	archive  atomic.Pointer[ArchiveSource]
	// PageMessages bounds the messages in one response frame.
	PageMessages int
}

// New returns a Reader.
// The commit map reads checkpoint chunks (and Follow loads checkpoints)
// through entries too.
func New(commits *CommitMap, entries EntrySource) *Reader {
	commits.useEntries(entries)
	return &Reader{commits: commits, entries: entries, PageMessages: 1000}
}

// Commits is the commit map the reader serves from.
func (r *Reader) Commits() *CommitMap { return r.commits }

// PageSegments bounds the entries and holes one page examines. A filtered
// query that matches little (or a long run of holes) ends its page there,
// with fewer than limit messages and NextOffset below C, instead of
// scanning the whole hot log in one request.
const PageSegments = 1024

// PageBytes bounds the encoded size of one page's messages (it holds at
// least one message): a page of 1,000 messages of up to 1 MiB would pass
// gRPC's message limit.
const PageBytes = 4 << 20

// pageChunk is how many segments a page takes from the commit map at a time.
const pageChunk = 64

// errNotSynced answers reads before the first watermark: C = 0 then would
// pass for an empty log, and every offset for one beyond it.
var errNotSynced = apierr.New(apierr.Unavailable, "the reader has not caught up with the sequencer's commit map yet")

// ReadPage returns up to limit matching messages at offsets ≥ from and below
// C, in offset order, with every hole met on the way as a skipped range.
// NextOffset is where the next page starts; it is below C when the page
// stopped at limit or after PageSegments entries and holes.
func (r *Reader) ReadPage(ctx context.Context, from uint64, limit int, filter Filter) (*orderlogpb.ReadResponse, error) {
	epoch, committed := r.commits.Committed()
	if epoch == 0 {
		return nil, errNotSynced
	}
	if from > committed {
		return nil, apierr.New(apierr.OffsetOutOfRange, "offset %d is beyond the committed watermark %d", from, committed)
	}
	if err := r.checkStart(from); err != nil {
		return nil, err
	}
	page := &orderlogpb.ReadResponse{NextOffset: from, Committed: committed}
	budget := &pageBudget{limit: limit, bytes: PageBytes}
	if start := r.LogStart(); from < start {
		if a := r.archive.Load(); a != nil && r.archiveCovers(from) {
			return page, r.readArchived(ctx, *a, from, start, page, budget, filter)
		}
		return page, r.readRetained(ctx, from, start, page, budget, filter)
	}
	for examined := 0; examined < PageSegments && !budget.full(page) && page.NextOffset < committed; {
		segments, _, err := r.commits.Segments(ctx, page.NextOffset, committed, min(pageChunk, PageSegments-examined))
		switch {
		case errors.Is(err, ErrBelowStart):
			return nil, apierr.New(apierr.OffsetOutOfRange, "offset %d is below the log start: %v", page.NextOffset, err)
		case err != nil:
			return nil, apierr.New(apierr.Unavailable, "commit map below the window: %v", err)
		}
		if len(segments) == 0 {
			return nil, &apierr.Error{Code: apierr.Internal, Message: fmt.Sprintf("reader: nothing decides offset %d below C=%d", page.NextOffset, committed)}
		}
		if segments[0].First > page.NextOffset {
			// Retention moved the log start past NextOffset while the page
			// was read (SetLogStart trimmed the map): the page ends here,
			// and the next one starts below the start (the retained set,
			// or OFFSET_OUT_OF_RANGE), never with a silent gap. An empty
			// page goes on there at once (a stream takes an empty page
			// for no progress).
			if len(page.Messages) == 0 && len(page.Skipped) == 0 {
				return r.ReadPage(ctx, page.NextOffset, limit, filter)
			}
			return page, nil
		}
		for _, seg := range segments {
			if budget.full(page) {
				break
			}
			examined++
			if seg.Hole {
				page.Skipped = append(page.Skipped, &orderlogpb.SkippedRange{First: max(seg.First, from), End: seg.End})
				page.NextOffset = seg.End
				continue
			}
			next, err := r.appendSegment(ctx, page, seg, from, budget, filter)
			if err != nil {
				return nil, err
			}
			page.NextOffset = next
		}
	}
	return page, nil
}

// pageBudget is what a page may still take: messages up to limit, message
// bytes up to bytes (the first message always fits).
type pageBudget struct {
	limit int
	bytes int
	used  int
	spent bool // a message did not fit in the bytes left
}

func (b *pageBudget) full(page *orderlogpb.ReadResponse) bool {
	return len(page.Messages) >= b.limit || b.spent
}

// take reports whether a message of size bytes fits, and counts it if so.
func (b *pageBudget) take(page *orderlogpb.ReadResponse, size int) bool {
	if len(page.Messages) > 0 && b.used+size > b.bytes {
		b.spent = true
		return false
	}
	b.used += size
	return true
}

// appendSegment adds the matching messages of one Written segment at
// offsets ≥ from, up to the page's budget, and returns the next offset.
func (r *Reader) appendSegment(ctx context.Context, page *orderlogpb.ReadResponse, seg Segment, from uint64, budget *pageBudget, filter Filter) (uint64, error) {
	payload, err := r.entries.ReadEntry(ctx, seg.Ledger, seg.Entry)
	if err != nil {
		return 0, apierr.New(apierr.Unavailable, "read ledger %d entry %d: %v", seg.Ledger, seg.Entry, err)
	}
	entry, err := decodeSegmentEntry(payload, seg)
	if err != nil {
		return 0, &apierr.Error{Code: apierr.Internal, Message: err.Error()}
	}
	ingestTime := entry.header.IngestTimeMicros
	for i := range entry.records {
		offset := seg.First + uint64(i)
		if offset < from {
			continue
		}
		if budget.full(page) {
			return offset, nil
		}
		rec := &entry.records[i]
		if !filter.matches(rec.Topic, rec.Key, ingestTime) {
			continue
		}
		if !filter.IncludeHidden && r.topics.expired(rec.Topic, offset, ingestTime) {
			if filter.selectsAll() {
				skipExpired(page, offset)
			}
			continue
		}
		producerID, seq := entry.producerOf(i)
		stored := &orderlogpb.StoredMessage{Offset: offset, Message: batch.ToProto(rec),
			ProducerId: producerID, ProducerSeq: seq, IngestTimeUs: ingestTime}
		// Everything the message encodes to counts: headers and message
		// ids too, not only the value.
		if !budget.take(page, proto.Size(stored)) {
			return offset, nil
		}
		page.Messages = append(page.Messages, stored)
	}
	return seg.End, nil
}

// Stream calls emit with pages from `from` on, up to limit messages in total
// (0: until C when the call started, or forever when follow is set). With
// follow it waits for C to advance instead of ending.
func (r *Reader) Stream(ctx context.Context, from uint64, limit int, filter Filter, follow bool, emit func(*orderlogpb.ReadResponse) error) error {
	epoch, end := r.commits.Committed()
	if !follow && epoch == 0 {
		return errNotSynced
	}
	if !follow && from > end {
		return apierr.New(apierr.OffsetOutOfRange, "offset %d is beyond the committed watermark %d", from, end)
	}
	if err := r.checkStart(from); err != nil {
		return err
	}
	sent := 0
	for {
		if !follow && from >= end {
			return nil
		}
		if follow {
			if _, err := r.commits.WaitAbove(ctx, from); err != nil {
				return apierr.New(apierr.Timeout, "tail ended: %v", err)
			}
		}
		want := r.PageMessages
		if limit > 0 {
			want = min(want, limit-sent)
		}
		page, err := r.ReadPage(ctx, from, want, filter)
		if err != nil {
			return err
		}
		if !follow && page.NextOffset > end { // a plain read stops at C as it was at the start
			trimToEnd(page, end)
		}
		if len(page.Messages) > 0 || len(page.Skipped) > 0 {
			if err := emit(page); err != nil {
				return err
			}
		}
		sent += len(page.Messages)
		if page.NextOffset <= from && len(page.Messages) == 0 {
			return fmt.Errorf("reader: no progress at offset %d", from)
		}
		from = page.NextOffset
		if limit > 0 && sent >= limit {
			return nil
		}
	}
}

// trimToEnd drops what lies at or beyond end from a page.
func trimToEnd(page *orderlogpb.ReadResponse, end uint64) {
	kept := page.Messages[:0]
	for _, m := range page.Messages {
		if m.Offset < end {
			kept = append(kept, m)
		}
	}
	page.Messages = kept
	skipped := page.Skipped[:0]
	for _, s := range page.Skipped {
		if s.First < end {
			s.End = min(s.End, end)
			skipped = append(skipped, s)
		}
	}
	page.Skipped = skipped
	page.NextOffset = end
}
