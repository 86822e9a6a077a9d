package reader

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"

	"orderlog/sequencer"
)

// A reader keeps the commit map below the newest checkpoint it loaded on
// the checkpoint's ledger, not in memory (docs/design.md §7): the index
// root (one small entry) names the page listing the chunks of each offset
// range, and a lookup there loads that page and the chunk — up to 16,384
// segments — into small LRUs. So a fresh reader is ready after one root
// read however long the history, and a long-running one holds a bounded
// window.

// ErrBelowStart is returned for an offset below the log's start: the
// checkpoint dropped it under the retention floor.
var ErrBelowStart = errors.New("reader: offset below the log start")

// ErrNoCheckpoint is returned when a reader below the sequencer's
// retained records finds no checkpoint to start from.
var ErrNoCheckpoint = errors.New("reader: no checkpoint to start from")

// Checkpoint is one loaded commit-log checkpoint: its index root, and
// its pages and chunks on demand. Immutable but for the caches.
type Checkpoint struct {
	pointer sequencer.CheckpointPointer
	index   sequencer.CheckpointIndex
	entries EntrySource
	pages   *lru[[]sequencer.ChunkRef]
	chunks  *lru[[]Segment]
}

// cachedPages is the LRU of index pages (a page lists up to 1,024 chunks,
// about 40 KiB decoded).
const cachedPages = 4

// LoadCheckpoint reads the newest checkpoint's pointer and index root;
// nil, nil when none was written yet.
func LoadCheckpoint(ctx context.Context, cli *clientv3.Client, entries EntrySource, cachedChunks int) (*Checkpoint, error) {
	p, err := sequencer.ReadCheckpoint(ctx, cli)
	if err != nil || p.IsZero() {
		return nil, err
	}
	payload, err := entries.ReadEntry(ctx, p.Ledger, p.IndexEntry)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %d index: %w", p.Ledger, err)
	}
	ix, err := sequencer.DecodeCheckpointIndex(payload)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %d index: %w", p.Ledger, err)
	}
	if ix.Start != p.Start || ix.End != p.End {
		return nil, fmt.Errorf("%w: checkpoint %d index covers [%d, %d), its pointer [%d, %d)",
			sequencer.ErrCorruptCheckpoint, p.Ledger, ix.Start, ix.End, p.Start, p.End)
	}
	return newCheckpoint(p, ix, entries, cachedChunks), nil
}

func newCheckpoint(p sequencer.CheckpointPointer, ix sequencer.CheckpointIndex, entries EntrySource, cachedChunks int) *Checkpoint {
	return &Checkpoint{pointer: p, index: ix, entries: entries,
		pages: newLRU[[]sequencer.ChunkRef](cachedPages), chunks: newLRU[[]Segment](cachedChunks)}
}

// Start and End bound the offsets the checkpoint's chunks hold.
func (c *Checkpoint) Start() uint64 { return c.index.Start }
func (c *Checkpoint) End() uint64   { return c.index.End }

// Segments returns up to max segments overlapping [from, to) (to ≤ End),
// in order, from the pages and chunks that hold them.
func (c *Checkpoint) Segments(ctx context.Context, from, to uint64, max int) ([]Segment, error) {
	if from < c.index.Start {
		return nil, fmt.Errorf("%w: %d < %d", ErrBelowStart, from, c.index.Start)
	}
	pages := c.index.Pages
	var out []Segment
	for p := sort.Search(len(pages), func(i int) bool { return pages[i].Range.End > from }); p < len(pages) && pages[p].Range.First < to && len(out) < max; p++ {
		chunks, err := c.page(ctx, pages[p])
		if err != nil {
			return nil, err
		}
		i := sort.Search(len(chunks), func(i int) bool { return chunks[i].Range.End > from })
		for ; i < len(chunks) && chunks[i].Range.First < to && len(out) < max; i++ {
			segs, err := c.chunk(ctx, chunks[i])
			if err != nil {
				return nil, err
			}
			j := sort.Search(len(segs), func(j int) bool { return segs[j].End > from })
			for ; j < len(segs) && segs[j].First < to && len(out) < max; j++ {
				out = append(out, segs[j])
			}
		}
	}
	return out, nil
}

// page returns an index page's chunk refs, from the cache or its entry.
func (c *Checkpoint) page(ctx context.Context, ref sequencer.PageRef) ([]sequencer.ChunkRef, error) {
	key := entryKey{ref.Ledger, ref.Entry}
	if chunks, ok := c.pages.get(key); ok {
		return chunks, nil
	}
	payload, err := c.entries.ReadEntry(ctx, ref.Ledger, ref.Entry)
	if err != nil {
		return nil, fmt.Errorf("checkpoint page %d/%d: %w", ref.Ledger, ref.Entry, err)
	}
	chunks, err := sequencer.DecodeCheckpointPage(payload)
	if err != nil {
		return nil, fmt.Errorf("checkpoint page %d/%d: %w", ref.Ledger, ref.Entry, err)
	}
	if chunks[0].Range.First != ref.Range.First || chunks[len(chunks)-1].Range.End != ref.Range.End {
		return nil, fmt.Errorf("%w: page %d/%d does not tile %v", sequencer.ErrCorruptCheckpoint, ref.Ledger, ref.Entry, ref.Range)
	}
	c.pages.put(key, chunks, len(chunks))
	return chunks, nil
}

// chunk returns a chunk's segments, from the cache or its ledger entry.
func (c *Checkpoint) chunk(ctx context.Context, ref sequencer.ChunkRef) ([]Segment, error) {
	key := entryKey{ref.Ledger, ref.Entry}
	if segs, ok := c.chunks.get(key); ok {
		return segs, nil
	}
	payload, err := c.entries.ReadEntry(ctx, ref.Ledger, ref.Entry)
	if err != nil {
		return nil, fmt.Errorf("checkpoint chunk %d/%d: %w", ref.Ledger, ref.Entry, err)
	}
	records, err := sequencer.DecodeCheckpointChunk(payload)
	if err != nil {
		return nil, fmt.Errorf("checkpoint chunk %d/%d: %w", ref.Ledger, ref.Entry, err)
	}
	segs := make([]Segment, len(records))
	for i, r := range records {
		segs[i] = Segment{First: r.Range.First, End: r.Range.End, Hole: r.Kind == sequencer.KindHole, Ledger: r.Ledger, Entry: r.Entry}
	}
	if len(segs) == 0 || segs[0].First != ref.Range.First || segs[len(segs)-1].End != ref.Range.End {
		return nil, fmt.Errorf("%w: chunk %d/%d does not hold %v", sequencer.ErrCorruptCheckpoint, ref.Ledger, ref.Entry, ref.Range)
	}
	c.chunks.put(key, segs, len(segs))
	return segs, nil
}

// entryKey names a checkpoint ledger entry.
type entryKey struct {
	ledger uint64
	entry  int64
}

// lru is a small LRU of decoded checkpoint entries.
type lru[V any] struct {
	size int
	mu   struct {
		sync.Mutex
		order *list.List // of entryKey, most recent first
		items map[entryKey]*list.Element
		vals  map[entryKey]lruValue[V]
	}
}

type lruValue[V any] struct {
	v     V
	items int // segments or chunk refs, for metrics
}

func newLRU[V any](size int) *lru[V] {
	c := &lru[V]{size: max(1, size)}
	c.mu.order = list.New()
	c.mu.items = make(map[entryKey]*list.Element)
	c.mu.vals = make(map[entryKey]lruValue[V])
	return c
}

func (c *lru[V]) get(k entryKey) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.mu.items[k]
	if !ok {
		var zero V
		return zero, false
	}
	c.mu.order.MoveToFront(e)
	return c.mu.vals[k].v, true
}

func (c *lru[V]) put(k entryKey, v V, items int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.mu.items[k]; ok {
		return
	}
	c.mu.items[k] = c.mu.order.PushFront(k)
	c.mu.vals[k] = lruValue[V]{v, items}
	for c.mu.order.Len() > c.size {
		old := c.mu.order.Remove(c.mu.order.Back()).(entryKey)
		delete(c.mu.items, old)
		delete(c.mu.vals, old)
	}
}

// resident is the number of items (segments, chunk refs) the cache holds.
func (c *lru[V]) resident() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, v := range c.mu.vals {
		n += v.items
	}
	return n
}
