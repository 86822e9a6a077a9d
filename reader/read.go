package reader

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"orderlog/internal/apierr"
	"orderlog/internal/partition"
	"orderlog/proto/orderlogpb"
	"orderlog/proto/producewire"
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
	// Partitions > 0 selects the messages in virtual partition Partition
	// of a topic with that many partitions (partition.Of their key).
	Partition, Partitions uint32
	// ProducerID > 0 selects that producer's messages.
	ProducerID uint64
	// Assigned, when not nil, selects the messages of the topics it names,
	// in the virtual partitions it holds for each (a consumer group
	// member's assignment).
	Assigned map[string]*partition.Set
}

// selectsAll reports whether f is the zero Filter.
func (f Filter) selectsAll() bool {
	return f.Topic == "" && f.Key == nil && f.FromTimeMicros == 0 && f.ToTimeMicros == 0 && f.Partitions == 0 &&
		f.ProducerID == 0 && f.Assigned == nil
}

func (f Filter) matches(topic string, key []byte, ingestTime int64, producer uint64) bool {
	return (f.ProducerID == 0 || f.ProducerID == producer) &&
		(f.Topic == "" || f.Topic == topic) &&
		(f.Key == nil || bytes.Equal(f.Key, key)) &&
		(f.FromTimeMicros == 0 || ingestTime >= f.FromTimeMicros) &&
		(f.ToTimeMicros == 0 || ingestTime < f.ToTimeMicros) &&
		(f.Partitions == 0 || partition.Of(key, f.Partitions) == f.Partition) &&
		(f.Assigned == nil || f.Assigned[topic].Holds(key))
}

// Reader serves reads from a commit map and an entry source.
type Reader struct {
	commits  *CommitMap
	entries  EntrySource
	start    logStart
	retained retainedSet
	topics   topicRetention
	archive  atomic.Pointer[ArchiveSource]
	decoded  entryCache
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
// stopped at limit or after PageSegments entries and holes. The page is
// the caller's to keep: messages of entries borrowed from the local WAL
// store are copied out of it (Stream's pages are not).
func (r *Reader) ReadPage(ctx context.Context, from uint64, limit int, filter Filter) (*orderlogpb.ReadResponse, error) {
	var pins entryPins
	defer pins.release()
	page, err := r.readPage(ctx, from, limit, filter, &pins)
	if page != nil && pins.borrowed() {
		detachPage(page)
	}
	return page, err
}

// readPage is ReadPage with the page's messages aliasing the entries it
// read: pins holds the borrowed ones, and the page is valid until they are
// released.
func (r *Reader) readPage(ctx context.Context, from uint64, limit int, filter Filter, pins *entryPins) (*orderlogpb.ReadResponse, error) {
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
	budget := &pageBudget{limit: limit, bytes: PageBytes, pins: pins}
	examined := 0
	if start := r.LogStart(); from < start {
		// Below the start first; a page that reaches the start with room
		// left goes on in the hot log, as it would have before the start
		// moved.
		var err error
		if examined, err = r.readBelowStart(ctx, from, start, page, budget, filter); err != nil || page.NextOffset < start {
			return page, err
		}
		from = page.NextOffset
	}
	for examined < PageSegments && !budget.full(page) && page.NextOffset < committed {
		segments, _, err := r.commits.Segments(ctx, page.NextOffset, committed, min(pageChunk, PageSegments-examined))
		switch {
		case errors.Is(err, ErrBelowStart):
			return nil, apierr.New(apierr.OffsetOutOfRange, "offset %d is below the log start: %v", page.NextOffset, err)
		case err != nil:
			return nil, apierr.New(apierr.Unavailable, "commit map below the window: %v", err)
		}
		if len(segments) == 0 && r.LogStart() <= page.NextOffset {
			return nil, &apierr.Error{Code: apierr.Internal, Message: fmt.Sprintf("reader: nothing decides offset %d below C=%d", page.NextOffset, committed)}
		}
		if len(segments) == 0 || segments[0].First > page.NextOffset {
			// Retention moved the log start past NextOffset while the page
			// was read (SetLogStart trimmed the map, up to C at most): the
			// page ends here, and the next one starts below the start (the
			// archive, the retained set, or OFFSET_OUT_OF_RANGE), never
			// with a silent gap. An empty page goes on there at once (a
			// stream takes an empty page for no progress).
			if len(page.Messages) == 0 && len(page.Skipped) == 0 {
				return r.readPage(ctx, page.NextOffset, limit, filter, pins)
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
			next, err := r.appendSegment(ctx, page, seg, from, seg.End, budget, filter)
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
	// pins holds the borrowed entries the page's messages alias.
	pins *entryPins
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
// offsets in [from, to), up to the page's budget, and returns the next
// offset.
func (r *Reader) appendSegment(ctx context.Context, page *orderlogpb.ReadResponse, seg Segment, from, to uint64, budget *pageBudget, filter Filter) (uint64, error) {
	entry, err := r.segmentEntry(ctx, seg, budget.pins)
	if err != nil {
		return 0, err
	}
	ingestTime := entry.header.IngestTimeMicros
	var slab []storedMessage
	for i := range entry.records {
		offset := seg.First + uint64(i)
		if offset < from {
			continue
		}
		if offset >= to {
			return to, nil
		}
		if budget.full(page) {
			return offset, nil
		}
		rec := &entry.records[i]
		producerID, seq := entry.producerOf(i)
		if !filter.matches(rec.Topic, rec.Key, ingestTime, producerID) {
			continue
		}
		if !filter.IncludeHidden && r.topics.expired(rec.Topic, offset, ingestTime) {
			if filter.selectsAll() {
				skipExpired(page, offset)
			}
			continue
		}
		if len(slab) == 0 {
			slab = make([]storedMessage, min(len(entry.records)-i, budget.limit-len(page.Messages), slabMessages))
		}
		stored := slab[0].fill(offset, rec, producerID, seq, ingestTime)
		// Everything the message encodes to counts: headers and message
		// ids too, not only the value.
		if !budget.take(page, producewire.StoredMessageSize(stored)) {
			return offset, nil
		}
		slab = slab[1:]
		page.Messages = append(page.Messages, stored)
	}
	return seg.End, nil
}

// Stream calls emit with pages from `from` on, up to limit messages in total
// (0: until C when the call started, or forever when follow is set). With
// follow it waits for C to advance instead of ending. The next page is read
// while emit sends the one before (readAhead).
//
// A page is valid only until emit returns: its messages may alias entries
// borrowed from the local WAL store's mapped segments, given back once
// emit is done (emit encodes or copies what it keeps).
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
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pages := make(chan pinnedPage, streamReadAhead)
	var readErr error
	go func() {
		defer close(pages)
		readErr = r.readPages(ctx, streamSpan{from: from, end: end, limit: limit, follow: follow}, filter, pages)
	}()
	for p := range pages {
		err := emit(p.page)
		p.pins.release()
		if err != nil {
			cancel()
			for p := range pages { // no read of this stream outlives it
				p.pins.release()
			}
			return err
		}
	}
	return readErr // set before pages closed
}

// pinnedPage is a page of a stream with the borrowed entries it aliases.
type pinnedPage struct {
	page *orderlogpb.ReadResponse
	pins *entryPins
}

// streamReadAhead is how many pages a stream reads before emit has taken
// them: one is read while the one before it is encoded and sent, so the
// reading and the sending each take a core of their own.
const streamReadAhead = 1

// streamSpan is what Stream reads: from `from`, up to end (C when the call
// started) or following C, at most limit messages (0: no limit).
type streamSpan struct {
	from, end uint64
	limit     int
	follow    bool
}

// readPages reads span's pages into pages, in order, and returns what ends
// the stream (nil: the span is read).
func (r *Reader) readPages(ctx context.Context, span streamSpan, filter Filter, pages chan<- pinnedPage) error {
	from, sent := span.from, 0
	for {
		if !span.follow && from >= span.end {
			return nil
		}
		if span.follow {
			if _, err := r.commits.WaitAbove(ctx, from); err != nil {
				return apierr.New(apierr.Timeout, "tail ended: %v", err)
			}
		}
		want := r.PageMessages
		if span.limit > 0 {
			want = min(want, span.limit-sent)
		}
		pins := &entryPins{}
		page, err := r.readPage(ctx, from, want, filter, pins)
		if err != nil {
			pins.release()
			return err
		}
		if !span.follow && page.NextOffset > span.end { // a plain read stops at C as it was at the start
			TrimToEnd(page, span.end)
		}
		if len(page.Messages) == 0 && len(page.Skipped) == 0 {
			pins.release()
		} else {
			select {
			case pages <- pinnedPage{page: page, pins: pins}:
			case <-ctx.Done():
				pins.release()
				return apierr.New(apierr.Timeout, "read ended: %v", ctx.Err())
			}
		}
		sent += len(page.Messages)
		if page.NextOffset <= from && len(page.Messages) == 0 {
			return fmt.Errorf("reader: no progress at offset %d", from)
		}
		from = page.NextOffset
		if span.limit > 0 && sent >= span.limit {
			return nil
		}
	}
}

// TrimToEnd drops what lies at or beyond end from a page (one that
// reaches past end; others are left as they are).
func TrimToEnd(page *orderlogpb.ReadResponse, end uint64) {
	if page.NextOffset <= end {
		return
	}
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

// detachPage copies what the page's messages alias (keys, values, message
// ids, header values) into one allocation of the page's own, so that it
// outlives the entries it was read from. Topics and header keys are
// strings the batch decoder copied already.
func detachPage(page *orderlogpb.ReadResponse) {
	size := 0
	for _, st := range page.Messages {
		m := st.Message
		size += len(m.Key) + len(m.Value) + len(m.MessageId)
		for _, h := range m.Headers {
			size += len(h.Value)
		}
	}
	buf := make([]byte, 0, size)
	clone := func(b []byte) []byte {
		if b == nil {
			return nil
		}
		start := len(buf)
		buf = append(buf, b...)
		return buf[start:len(buf):len(buf)]
	}
	for _, st := range page.Messages {
		m := st.Message
		m.Key, m.Value, m.MessageId = clone(m.Key), clone(m.Value), clone(m.MessageId)
		for _, h := range m.Headers {
			h.Value = clone(h.Value)
		}
	}
}
