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
// (one small entry) names the chunk holding each offset range, and a
// lookup there loads that chunk — a few thousand segments — into a small
// LRU. So a fresh reader is ready after one index read however long the
// history, and a long-running one holds a bounded window.

// ErrBelowStart is returned for an offset below the log's start: the
// checkpoint dropped it under the retention floor.
var ErrBelowStart = errors.New("reader: offset below the log start")

// ErrNoCheckpoint is returned when a reader below the sequencer's
// retained records finds no checkpoint to start from.
var ErrNoCheckpoint = errors.New("reader: no checkpoint to start from")

// Checkpoint is one loaded commit-log checkpoint: its index, and its
// chunks on demand. Immutable but for the chunk cache.
type Checkpoint struct {
	pointer sequencer.CheckpointPointer
	index   sequencer.CheckpointIndex
	entries EntrySource
	cache   *chunkCache
}

// LoadCheckpoint reads the newest checkpoint's pointer and index; nil,
// nil when none was written yet.
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
	return &Checkpoint{pointer: p, index: ix, entries: entries, cache: newChunkCache(cachedChunks)}, nil
}

// Start and End bound the offsets the checkpoint's chunks hold.
func (c *Checkpoint) Start() uint64 { return c.index.Start }
func (c *Checkpoint) End() uint64   { return c.index.End }

// Segments returns up to max segments overlapping [from, to) (to ≤ End),
// in order, from the chunks that hold them.
func (c *Checkpoint) Segments(ctx context.Context, from, to uint64, max int) ([]Segment, error) {
	if from < c.index.Start {
		return nil, fmt.Errorf("%w: %d < %d", ErrBelowStart, from, c.index.Start)
	}
	chunks := c.index.Chunks
	i := sort.Search(len(chunks), func(i int) bool { return chunks[i].Range.End > from })
	var out []Segment
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
	return out, nil
}

// chunk returns a chunk's segments, from the cache or its ledger entry.
func (c *Checkpoint) chunk(ctx context.Context, ref sequencer.ChunkRef) ([]Segment, error) {
	if segs, ok := c.cache.get(ref); ok {
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
	c.cache.put(ref, segs)
	return segs, nil
}

// chunkCache is a small LRU of decoded chunks.
type chunkCache struct {
	size int
	mu   struct {
		sync.Mutex
		order *list.List // of chunkKey, most recent first
		items map[chunkKey]*list.Element
		segs  map[chunkKey][]Segment
	}
}

type chunkKey struct {
	ledger uint64
	entry  int64
}

func newChunkCache(size int) *chunkCache {
	c := &chunkCache{size: max(1, size)}
	c.mu.order = list.New()
	c.mu.items = make(map[chunkKey]*list.Element)
	c.mu.segs = make(map[chunkKey][]Segment)
	return c
}

func (c *chunkCache) get(ref sequencer.ChunkRef) ([]Segment, bool) {
	k := chunkKey{ref.Ledger, ref.Entry}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.mu.items[k]
	if !ok {
		return nil, false
	}
	c.mu.order.MoveToFront(e)
	return c.mu.segs[k], true
}

func (c *chunkCache) put(ref sequencer.ChunkRef, segs []Segment) {
	k := chunkKey{ref.Ledger, ref.Entry}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.mu.items[k]; ok {
		return
	}
	c.mu.items[k] = c.mu.order.PushFront(k)
	c.mu.segs[k] = segs
	for c.mu.order.Len() > c.size {
		old := c.mu.order.Remove(c.mu.order.Back()).(chunkKey)
		delete(c.mu.items, old)
		delete(c.mu.segs, old)
	}
}

// resident is the number of segments the cache holds.
func (c *chunkCache) resident() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, s := range c.mu.segs {
		n += len(s)
	}
	return n
}
