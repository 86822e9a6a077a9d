package tiering

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"orderlog/tiering/objstore"
)

// rangeStore counts the ranged GETs of each block-aligned offset and,
// while gate is set, holds them until it is closed (or their context
// ends).
type rangeStore struct {
	objstore.Store
	mu   sync.Mutex
	gets map[int64]int
	gate chan struct{}
}

func (s *rangeStore) GetRange(ctx context.Context, key string, off, n int64) ([]byte, error) {
	s.mu.Lock()
	s.gets[off]++
	gate := s.gate
	s.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return s.Store.GetRange(ctx, key, off, n)
}

func (s *rangeStore) getsAt(off int64) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gets[off]
}

// newTestCache returns a cache of 1 KiB blocks over an object of size
// bytes (byte i is i*7), without read-ahead.
func newTestCache(t *testing.T, size int64, limit int64) (*blockCache, *rangeStore, []byte) {
	t.Helper()
	dir := t.TempDir()
	base, err := objstore.Open(context.Background(), "file://"+filepath.Join(dir, "store"), objstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i * 7)
	}
	if err := base.PutIfAbsent(context.Background(), "obj", bytes.NewReader(data), size); err != nil {
		t.Fatal(err)
	}
	store := &rangeStore{Store: base, gets: map[int64]int{}}
	c, err := newBlockCache(store, filepath.Join(dir, "cache"), 1024, limit, 0)
	if err != nil {
		t.Fatal(err)
	}
	return c, store, data
}

func readCached(t *testing.T, c *blockCache, data []byte, off, n int64) {
	t.Helper()
	p := make([]byte, n)
	if _, err := c.readAt(context.Background(), "obj", int64(len(data)), p, off); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(p, data[off:off+n]) {
		t.Fatalf("read [%d, %d): wrong bytes", off, off+n)
	}
}

// TestAShortBlockFileIsAMiss: a block file on the disk shorter than the
// block (a crash mid-write, a full disk) is fetched again, never served
// short (found in review: writes went straight to the block's file, and
// a short read panicked slicing it or looped).
func TestAShortBlockFileIsAMiss(t *testing.T) {
	c, store, data := newTestCache(t, 10_000, 1<<20)
	c.memLimit = 1024 // one block in memory
	readCached(t, c, data, 100, 50)
	readCached(t, c, data, 5000, 50) // pushes block 0 out of memory
	if err := os.WriteFile(c.path(blockKey{"obj", 0}), data[:10], 0o644); err != nil {
		t.Fatal(err)
	}
	readCached(t, c, data, 500, 300)
	if n := store.getsAt(0); n != 2 {
		t.Fatalf("block 0 fetched %d times, want again after its file went short", n)
	}
	if matches, _ := filepath.Glob(filepath.Join(c.dir, "tmp-*")); len(matches) > 0 {
		t.Fatalf("temporary files left: %v", matches)
	}
}

// TestAReadThatLeavesDoesNotFailOthers: a read whose context ends stops
// waiting at once; another read of the same block gets it from the same
// GET (found in review: the GET ran with the first reader's context, and
// its end failed every read waiting for the block).
func TestAReadThatLeavesDoesNotFailOthers(t *testing.T) {
	c, store, data := newTestCache(t, 4096, 1<<20)
	store.gate = make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	first := make(chan error, 1)
	go func() {
		_, err := c.readAt(ctx, "obj", 4096, make([]byte, 10), 0)
		first <- err
	}()
	for store.getsAt(0) == 0 {
		time.Sleep(time.Millisecond)
	}
	second := make(chan error, 1)
	p := make([]byte, 10)
	go func() {
		_, err := c.readAt(context.Background(), "obj", 4096, p, 0)
		second <- err
	}()
	cancel()
	if err := <-first; !errors.Is(err, context.Canceled) {
		t.Fatalf("the read that left: %v", err)
	}
	close(store.gate)
	if err := <-second; err != nil || !bytes.Equal(p, data[:10]) {
		t.Fatalf("the read that stayed: %v", err)
	}
	if n := store.getsAt(0); n != 1 {
		t.Fatalf("%d GETs of the block", n)
	}
}

// TestConcurrentMissesFetchOnceWithinTheLimit: reads missing the same
// block at once cause one GET; the disk holds at most the limit.
func TestConcurrentMissesFetchOnceWithinTheLimit(t *testing.T) {
	c, store, data := newTestCache(t, 64<<10, 8<<10)
	c.memLimit = 2048
	store.gate = make(chan struct{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			readCached(t, c, data, 3000, 100)
		}()
	}
	for store.getsAt(2048) == 0 {
		time.Sleep(time.Millisecond)
	}
	close(store.gate)
	wg.Wait()
	if n := store.getsAt(2048); n != 1 {
		t.Fatalf("%d GETs for 8 concurrent misses", n)
	}
	for off := int64(0); off < int64(len(data)); off += 700 {
		readCached(t, c, data, off, min(700, int64(len(data))-off))
	}
	var used int64
	files, _ := os.ReadDir(c.dir)
	for _, f := range files {
		info, err := f.Info()
		if err != nil {
			t.Fatal(err)
		}
		used += info.Size()
	}
	if used > 8<<10 {
		t.Fatalf("%d bytes on the disk, limit %d", used, 8<<10)
	}
}
