package tiering

import (
	"container/list"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"orderlog/tiering/objstore"
)

// blockCache keeps blocks of archive objects in files on the local disk,
// least recently used out past a size limit, and the most recently used
// ones in memory too: a read below the log start fetches each block of an
// object once, by one ranged GET however many reads miss it at once, and
// the next blocks ahead.
//
// A block's file appears whole or not at all (written to a temporary file,
// then renamed), and a block read back is checked against the length it
// must have (the object's size and the block's index tell): a short or
// missing file is a miss, never a short block.
type blockCache struct {
	store     objstore.Store
	dir       string
	blockSize int64
	limit     int64 // bytes on disk
	memLimit  int64 // bytes in memory
	readAhead int   // blocks fetched ahead of a miss
	// fetchTimeout bounds a block's GET, which runs for every read waiting
	// for the block, not for the first one: a read whose context ends
	// stops waiting, the others still get the block.
	fetchTimeout time.Duration

	mu struct {
		sync.Mutex
		disk     lruBlocks // on disk: sizes
		mem      lruBlocks // in memory: data
		inflight map[blockKey]*fetch
	}
	prefetch chan struct{} // bounds the read-ahead fetches in flight
}

type blockKey struct {
	object string
	index  int64
}

// fetch is one load of a block (from the disk or the store) that
// concurrent misses wait for.
type fetch struct {
	done chan struct{}
	data []byte
	err  error
}

// memBlocks is how many blocks the memory keeps: a row group's column
// chunks are read side by side, each with its blocks ahead.
const memBlocks = 32

func newBlockCache(store objstore.Store, dir string, blockSize, limit int64, readAhead int) (*blockCache, error) {
	if err := os.RemoveAll(dir); err != nil { // blocks of an earlier run are not indexed
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	c := &blockCache{store: store, dir: dir, blockSize: blockSize, limit: limit, memLimit: memBlocks * blockSize,
		readAhead: readAhead, fetchTimeout: 2 * time.Minute, prefetch: make(chan struct{}, 4)}
	c.mu.disk.init()
	c.mu.mem.init()
	c.mu.inflight = map[blockKey]*fetch{}
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

// blockLen is the length block index of an object of size bytes has.
func (c *blockCache) blockLen(size, index int64) int64 {
	return min(c.blockSize, size-index*c.blockSize)
}

// block returns one block, whole: from memory, the disk or the store.
func (c *blockCache) block(ctx context.Context, object string, size, index int64) ([]byte, error) {
	key := blockKey{object, index}
	c.mu.Lock()
	if data, ok := c.mu.mem.get(key); ok {
		c.mu.Unlock()
		return data.([]byte), nil
	}
	f := c.startLocked(key, size)
	c.mu.Unlock()
	select {
	case <-f.done:
		return f.data, f.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// startLocked returns the load of key in flight, starting one if none is.
func (c *blockCache) startLocked(key blockKey, size int64) *fetch {
	if f, ok := c.mu.inflight[key]; ok {
		return f
	}
	f := &fetch{done: make(chan struct{})}
	c.mu.inflight[key] = f
	go c.load(key, size, f)
	return f
}

// load reads a block from the disk, or else GETs it and keeps it there,
// and then in memory.
func (c *blockCache) load(key blockKey, size int64, f *fetch) {
	want := c.blockLen(size, key.index)
	data, ok := c.fromDisk(key, want)
	if !ok {
		ctx, cancel := context.WithTimeout(context.Background(), c.fetchTimeout)
		data, f.err = c.get(ctx, key, want)
		cancel()
	}
	c.mu.Lock()
	if f.err == nil {
		f.data = data
		c.mu.mem.add(key, want, data)
		c.mu.mem.trim(c.memLimit, nil)
	}
	delete(c.mu.inflight, key)
	c.mu.Unlock()
	close(f.done)
}

// fromDisk reads a block kept on the disk, if it is there whole; a file
// of another length is dropped.
func (c *blockCache) fromDisk(key blockKey, want int64) ([]byte, bool) {
	c.mu.Lock()
	_, ok := c.mu.disk.get(key)
	c.mu.Unlock()
	if !ok {
		return nil, false
	}
	data, err := os.ReadFile(c.path(key))
	if err == nil && int64(len(data)) == want {
		return data, true
	}
	c.mu.Lock()
	c.mu.disk.remove(key)
	c.mu.Unlock()
	os.Remove(c.path(key))
	return nil, false
}

// get GETs a block, checks its length and keeps it on the disk.
func (c *blockCache) get(ctx context.Context, key blockKey, want int64) ([]byte, error) {
	data, err := c.store.GetRange(ctx, key.object, key.index*c.blockSize, want)
	if err != nil {
		return nil, err
	}
	if int64(len(data)) != want {
		return nil, fmt.Errorf("tiering: block %d of %s: %d bytes, want %d", key.index, key.object, len(data), want)
	}
	if err := c.writeFile(key, data); err == nil {
		c.keep(key, want)
	}
	return data, nil
}

// writeFile writes a block's file whole or not at all: to a temporary
// file, then renamed. A crash or a full disk leaves at most a temporary
// file, which the next start removes with the directory.
func (c *blockCache) writeFile(key blockKey, data []byte) error {
	tmp, err := os.CreateTemp(c.dir, "tmp-*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(data)
	if closeErr := tmp.Close(); err == nil {
		err = closeErr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), c.path(key))
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}

// keep indexes a block written to the disk and evicts past the limit.
func (c *blockCache) keep(key blockKey, size int64) {
	c.mu.Lock()
	c.mu.disk.add(key, size, nil)
	var evicted []blockKey
	c.mu.disk.trim(c.limit, &evicted)
	c.mu.Unlock()
	for _, k := range evicted {
		os.Remove(c.path(k))
	}
}

// readAheadFrom loads the blocks after a read in the background, a few
// at a time at most; a block in memory or in flight is skipped.
func (c *blockCache) readAheadFrom(object string, size, index int64) {
	for i := index; i < index+int64(c.readAhead) && i*c.blockSize < size; i++ {
		key := blockKey{object, i}
		c.mu.Lock()
		_, inMemory := c.mu.mem.peek(key)
		_, inflight := c.mu.inflight[key]
		c.mu.Unlock()
		if inMemory || inflight {
			continue
		}
		select {
		case c.prefetch <- struct{}{}:
		default:
			return // enough in flight
		}
		c.mu.Lock()
		f := c.startLocked(key, size)
		c.mu.Unlock()
		go func() {
			<-f.done
			<-c.prefetch
		}()
	}
}

func (c *blockCache) path(key blockKey) string {
	return filepath.Join(c.dir, fmt.Sprintf("%s.%d", strings.ReplaceAll(key.object, "/", "_"), key.index))
}

// lruBlocks is a set of blocks, most recently used first, with their
// sizes and (in memory) data.
type lruBlocks struct {
	order *list.List // of *lruBlock
	byKey map[blockKey]*list.Element
	used  int64
}

type lruBlock struct {
	key  blockKey
	size int64
	data any
}

func (l *lruBlocks) init() {
	l.order, l.byKey = list.New(), map[blockKey]*list.Element{}
}

// get returns a block's data and marks it used.
func (l *lruBlocks) get(key blockKey) (any, bool) {
	e, ok := l.byKey[key]
	if !ok {
		return nil, false
	}
	l.order.MoveToFront(e)
	return e.Value.(*lruBlock).data, true
}

// peek returns a block's data without marking it used.
func (l *lruBlocks) peek(key blockKey) (any, bool) {
	e, ok := l.byKey[key]
	if !ok {
		return nil, false
	}
	return e.Value.(*lruBlock).data, true
}

func (l *lruBlocks) add(key blockKey, size int64, data any) {
	if e, ok := l.byKey[key]; ok {
		l.order.MoveToFront(e)
		return
	}
	l.byKey[key] = l.order.PushFront(&lruBlock{key, size, data})
	l.used += size
}

func (l *lruBlocks) remove(key blockKey) {
	if e, ok := l.byKey[key]; ok {
		b := l.order.Remove(e).(*lruBlock)
		delete(l.byKey, key)
		l.used -= b.size
	}
}

// trim drops the least recently used blocks while more than limit bytes
// are used (keeping one), appending their keys to evicted if not nil.
func (l *lruBlocks) trim(limit int64, evicted *[]blockKey) {
	for l.used > limit && l.order.Len() > 1 {
		b := l.order.Back().Value.(*lruBlock)
		l.remove(b.key)
		if evicted != nil {
			*evicted = append(*evicted, b.key)
		}
	}
}
