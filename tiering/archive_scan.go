package tiering

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"

	"orderlog/proto/orderlogpb"
	"orderlog/reader"
	"orderlog/tiering/parquetfile"
)

// Scan implements reader.ArchiveSource. Without a topic or key in the hint
// it reads each file with a parquetfile.Cursor, and keeps the cursor
// where the visit stopped (a node's page ended), so that the next page,
// starting there, goes on with it: no file is opened and no column sought
// again per page, and the next rows are decoded while the page is sent.
// With a topic or key it reads with File.Select: row groups and pages
// without a match are skipped before any data page is read, and visited
// as pruned ranges.
func (a *ArchiveReader) Scan(ctx context.Context, from, to uint64, hint reader.Filter, visit func(reader.ArchiveItem) bool) (uint64, error) {
	cursor := from
	for cursor < to {
		e, ok := a.entryAt(cursor)
		if !ok {
			return cursor, fmt.Errorf("tiering: no archive file holds offset %d", cursor)
		}
		w := &fileWalk{entry: e, pos: cursor, to: min(to, e.End), visit: visit}
		err := a.scanFile(ctx, w, hint)
		if err != nil || w.stopped {
			return w.pos, err
		}
		cursor = w.pos
	}
	return cursor, nil
}

// scanFile visits the walk's stretch of one file.
func (a *ArchiveReader) scanFile(ctx context.Context, w *fileWalk, hint reader.Filter) error {
	if !mayMatch(w.entry, hint) {
		w.skipTo(w.to, false)
		return nil
	}
	f, err := a.open(ctx, w.entry)
	if err != nil {
		return err
	}
	if hint.Topic != "" || len(hint.Key) > 0 {
		err = f.Select(ctx, w.pos, w.to, hint.Topic, hint.Key, func(s parquetfile.Selected) error {
			if s.Message != nil && !w.message(s.Message) || s.Message == nil && !w.skipTo(s.Skipped.End, s.Examined) {
				return errStop
			}
			return nil
		})
		if errors.Is(err, errStop) {
			return nil
		}
	} else {
		err = a.scanRows(ctx, f, w)
	}
	if err != nil || w.stopped {
		return err
	}
	w.skipTo(w.to, false) // holes only are left
	return nil
}

// scanRows visits the walk's messages read by a cursor: the one parked
// where the walk starts, else a new one to the file's end. A cursor the
// visit stopped is parked again where it stopped.
func (a *ArchiveReader) scanRows(ctx context.Context, f *parquetfile.File, w *fileWalk) error {
	c := a.cursors.take(w.entry.Object, w.pos)
	if c == nil {
		c = f.Cursor(w.pos, w.entry.End)
	}
	for {
		m, err := c.Peek(ctx)
		if err == io.EOF || err == nil && m.Offset >= w.to {
			c.Close()
			return nil
		}
		if err != nil {
			c.Close()
			return err
		}
		if !w.message(m) {
			a.cursors.park(w.entry.Object, w.pos, c)
			return nil
		}
		c.Take()
	}
}

// errStop ends a file's read where the visitor stopped.
var errStop = errors.New("tiering: the reader's page is full")

// fileWalk visits one file's stretch [pos, to) in offset order: messages,
// the entry's holes between them, and what lies between that holds no
// message to visit as pruned ranges. pos is the first offset not visited;
// stopped, that the visitor stopped at pos.
type fileWalk struct {
	entry   ManifestEntry
	pos, to uint64
	visit   func(reader.ArchiveItem) bool
	stopped bool
}

// message visits what lies before m (holes; there is no row there) and m.
func (w *fileWalk) message(m *orderlogpb.StoredMessage) bool {
	if !w.skipTo(m.Offset, false) {
		return false
	}
	if !w.visit(reader.ArchiveItem{Message: m}) {
		w.stopped = true
		return false
	}
	w.pos = m.Offset + 1
	return true
}

// skipTo visits [pos, end) as the entry's holes there and the pruned
// ranges between them (examined: their messages were looked at).
func (w *fileWalk) skipTo(end uint64, examined bool) bool {
	end = min(end, w.to)
	for w.pos < end {
		item := reader.ArchiveItem{PrunedFirst: w.pos, PrunedEnd: end, Examined: examined}
		next := end
		if h, ok := w.entry.holeAt(w.pos); ok {
			item = reader.ArchiveItem{Hole: &orderlogpb.SkippedRange{First: w.pos, End: min(h.End, end)}}
			next = item.Hole.End
		} else if h, ok := w.entry.nextHole(w.pos); ok && h.First < end {
			item.PrunedEnd, next = h.First, h.First
		}
		if !w.visit(item) {
			w.stopped = true
			return false
		}
		w.pos = next
	}
	return true
}

// mayMatch reports, from the manifest alone, whether a file may hold a
// message the hint selects (its ingest times bound a time range).
func mayMatch(e ManifestEntry, hint reader.Filter) bool {
	if e.Rows == 0 {
		return false
	}
	if hint.ToTimeMicros != 0 && e.FirstIngestMicros >= hint.ToTimeMicros {
		return false
	}
	return hint.FromTimeMicros == 0 || e.LastIngestMicros >= hint.FromTimeMicros
}

// parkedCursors keeps the cursors whose visit stopped (a page ended), by
// file and the offset the next page starts at, least recently parked out
// past a count.
type parkedCursors struct {
	limit int
	mu    struct {
		sync.Mutex
		order *list.List // of *parkedCursor, most recent first
		byKey map[cursorKey]*list.Element
	}
}

// cursorKey names a parked cursor: no message of object lies in [at, the
// offset of the message its Peek returns).
type cursorKey struct {
	object string
	at     uint64
}

type parkedCursor struct {
	key    cursorKey
	cursor *parquetfile.Cursor
}

func newParkedCursors(limit int) *parkedCursors {
	p := &parkedCursors{limit: limit}
	p.mu.order, p.mu.byKey = list.New(), map[cursorKey]*list.Element{}
	return p
}

// take removes and returns the cursor parked for object at, or nil.
func (p *parkedCursors) take(object string, at uint64) *parquetfile.Cursor {
	p.mu.Lock()
	defer p.mu.Unlock()
	e, ok := p.mu.byKey[cursorKey{object, at}]
	if !ok {
		return nil
	}
	p.mu.order.Remove(e)
	delete(p.mu.byKey, cursorKey{object, at})
	return e.Value.(*parkedCursor).cursor
}

// park keeps c for object at, closing the cursors it pushes out.
func (p *parkedCursors) park(object string, at uint64, c *parquetfile.Cursor) {
	key := cursorKey{object, at}
	var evicted []*parquetfile.Cursor
	p.mu.Lock()
	if e, ok := p.mu.byKey[key]; ok { // two reads stopped at the same offset
		evicted = append(evicted, p.mu.order.Remove(e).(*parkedCursor).cursor)
	}
	p.mu.byKey[key] = p.mu.order.PushFront(&parkedCursor{key, c})
	for p.mu.order.Len() > p.limit {
		old := p.mu.order.Remove(p.mu.order.Back()).(*parkedCursor)
		delete(p.mu.byKey, old.key)
		evicted = append(evicted, old.cursor)
	}
	p.mu.Unlock()
	for _, c := range evicted {
		c.Close()
	}
}

// closeAll closes every parked cursor.
func (p *parkedCursors) closeAll() {
	p.mu.Lock()
	var all []*parquetfile.Cursor
	for e := p.mu.order.Front(); e != nil; e = e.Next() {
		all = append(all, e.Value.(*parkedCursor).cursor)
	}
	p.mu.order.Init()
	clear(p.mu.byKey)
	p.mu.Unlock()
	for _, c := range all {
		c.Close()
	}
}

func (p *parkedCursors) len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mu.order.Len()
}

// nextHole returns the first hole starting above offset, if any.
func (e ManifestEntry) nextHole(offset uint64) (Hole, bool) {
	i := sort.Search(len(e.Holes), func(i int) bool { return e.Holes[i].First > offset })
	if i == len(e.Holes) {
		return Hole{}, false
	}
	return e.Holes[i], true
}
