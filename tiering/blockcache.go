package tiering

import (
	"container/list"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"orderlog/tiering/objstore"
)

// blockCache keeps blocks of archive objects in files on the local disk,
// least recently used out past a size limit: a read below the log start
// fetches each block of an object once, by one ranged GET however many
// reads miss it at once, and the next blocks ahead.
type blockCache struct {
	store     objstore.Store
	dir       string
	blockSize int64
	limit     int64 // bytes on disk
	readAhead int   // blocks fetched ahead of a miss

	mu struct {
		sync.Mutex
		lru      *list.List // of *cachedBlock, most recent first
		byKey    map[blockKey]*list.Element
		used     int64
		inflight map[blockKey]*fetch
	}
	prefetch chan struct{} // bounds the read-ahead fetches in flight
}

type blockKey struct {
	object string
	index  int64
}

type cachedBlock struct {
	key  blockKey
	size int64
}

// fetch is one GET of a block that concurrent misses wait for.
type fetch struct {
	done chan struct{}
	data []byte
	err  error
}

func newBlockCache(store objstore.Store, dir string, blockSize, limit int64, readAhead int) (*blockCache, error) {
	if err := os.RemoveAll(dir); err != nil { // blocks of an earlier run are not indexed
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	c := &blockCache{store: store, dir: dir, blockSize: blockSize, limit: limit, readAhead: readAhead,
		prefetch: make(chan struct{}, 4)}
	c.mu.lru, c.mu.byKey, c.mu.inflight = list.New(), map[blockKey]*list.Element{}, map[blockKey]*fetch{}
	return c, nil
}

// readAt fills p from object (of size bytes) at off.
func (c *blockCache) readAt(ctx context.Context, object string, size int64, p []byte, off int64) (int, error) {
	if off < 0 || off+int64(len(p)) > size {
		return 0, fmt.Errorf("tiering: read [%d, %d) of %s, which has %d bytes", off, off+int64(len(p)), object, size)
	}
	n := 0
	for n < len(p) {
		at := off + int64(n)
		index := at / c.blockSize
		block, err := c.block(ctx, object, size, index)
		if err != nil {
			return n, err
		}
		n += copy(p[n:], block[at-index*c.blockSize:])
		c.readAheadFrom(object, size, index+1)
	}
	return n, nil
}

// block returns one block, from the disk or fetched.
func (c *blockCache) block(ctx context.Context, object string, size, index int64) ([]byte, error) {
	key := blockKey{object, index}
	if data, ok := c.cached(key); ok {
		return data, nil
	}
	c.mu.Lock()
	f, waiting := c.mu.inflight[key]
	if !waiting {
		f = &fetch{done: make(chan struct{})}
		c.mu.inflight[key] = f
	}
	c.mu.Unlock()
	if !waiting {
		f.data, f.err = c.fetch(ctx, key, size)
		c.mu.Lock()
		delete(c.mu.inflight, key)
		c.mu.Unlock()
		close(f.done)
	}
	select {
	case <-f.done:
		return f.data, f.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// cached reads a block from the disk, if it is there.
func (c *blockCache) cached(key blockKey) ([]byte, bool) {
	c.mu.Lock()
	e, ok := c.mu.byKey[key]
	if ok {
		c.mu.lru.MoveToFront(e)
	}
	c.mu.Unlock()
	if !ok {
		return nil, false
	}
	data, err := os.ReadFile(c.path(key))
	return data, err == nil
}

// fetch GETs a block and keeps it on the disk.
func (c *blockCache) fetch(ctx context.Context, key blockKey, size int64) ([]byte, error) {
	start := key.index * c.blockSize
	data, err := c.store.GetRange(ctx, key.object, start, min(c.blockSize, size-start))
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(c.path(key), data, 0o644); err == nil {
		c.keep(key, int64(len(data)))
	}
	return data, nil
}

// keep indexes a block written to the disk and evicts past the limit.
func (c *blockCache) keep(key blockKey, size int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.mu.byKey[key]; ok {
		return
	}
	c.mu.byKey[key] = c.mu.lru.PushFront(&cachedBlock{key, size})
	c.mu.used += size
	for c.mu.used > c.limit && c.mu.lru.Len() > 1 {
		old := c.mu.lru.Remove(c.mu.lru.Back()).(*cachedBlock)
		delete(c.mu.byKey, old.key)
		c.mu.used -= old.size
		os.Remove(c.path(old.key))
	}
}

// readAheadFrom fetches the blocks after a read in the background, a few
// at a time at most; a block cached or in flight is skipped.
func (c *blockCache) readAheadFrom(object string, size, index int64) {
	for i := index; i < index+int64(c.readAhead) && i*c.blockSize < size; i++ {
		key := blockKey{object, i}
		c.mu.Lock()
		_, cached := c.mu.byKey[key]
		_, inflight := c.mu.inflight[key]
		c.mu.Unlock()
		if cached || inflight {
			continue
		}
		select {
		case c.prefetch <- struct{}{}:
		default:
			return // enough in flight
		}
		go func() {
			defer func() { <-c.prefetch }()
			_, _ = c.block(context.Background(), object, size, key.index)
		}()
	}
}

func (c *blockCache) path(key blockKey) string {
	return filepath.Join(c.dir, fmt.Sprintf("%s.%d", strings.ReplaceAll(key.object, "/", "_"), key.index))
}
