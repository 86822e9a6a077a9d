package tiering

import (
	"context"
	"fmt"
	"log/slog"
	"path"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"orderlog/internal/event"
	"orderlog/internal/keys"
	"orderlog/reader"
	"orderlog/tiering/objstore"
	"orderlog/tiering/parquetfile"
)

// ArchiveReader serves reads of the archive (reader.ArchiveSource): it
// follows the head in etcd, keeps the manifest's entries in memory, and
// reads the files through a block cache on the local disk.
//
// Its view of the archive is always a contiguous prefix [head.First,
// Loaded) of what the head says is archived, [head.First, T): a segment
// that fails to load leaves Loaded at its first offset, and the load is
// tried again (every RetryInterval, and at every move of the head) until
// Loaded reaches T.
type ArchiveReader struct {
	store         objstore.Store
	prefix        string
	blocks        *blockCache
	files         *openFiles
	cursors       *parkedCursors
	keys          *parquetfile.Keys
	logger        *slog.Logger
	retryInterval time.Duration

	mu struct {
		sync.Mutex
		known   bool // a head was seen
		head    Head
		entries []ManifestEntry // contiguous from head.First, in offset order, ending at or below head.T
	}
}

// ReaderOptions configure an ArchiveReader.
type ReaderOptions struct {
	Prefix string
	// CacheDir holds the block cache (emptied at the start), CacheBytes
	// bounds it. Defaults: 1 GiB, blocks of 1 MiB, 2 read ahead.
	CacheDir   string
	CacheBytes int64
	// OpenFiles bounds the files kept open (footer and page indexes in
	// memory), least recently used out. Default 64.
	OpenFiles int
	// RetryInterval is the pause before loading the manifest again after
	// a segment failed to load. Default 1 s.
	RetryInterval time.Duration
	Logger        *slog.Logger
	// Keys decrypt encrypted files (files in clear read without). A file
	// under a key id they lack, or that its key does not decrypt, is not
	// served: reads of its range fail with an error naming the key id.
	Keys *parquetfile.Keys
}

// parkedCursorsMax bounds the cursors kept between pages: each holds up
// to two chunks of decoded rows (parquetfile.Cursor; ~18 MB with 1 KiB
// messages), so that 4 readers streaming the archive at once each go on
// with their own.
const parkedCursorsMax = 4

// NewArchiveReader returns a reader of store's archive; call Follow, and
// Close when done.
func NewArchiveReader(store objstore.Store, o ReaderOptions) (*ArchiveReader, error) {
	if o.CacheBytes <= 0 {
		o.CacheBytes = 1 << 30
	}
	if o.OpenFiles <= 0 {
		o.OpenFiles = 64
	}
	if o.RetryInterval <= 0 {
		o.RetryInterval = time.Second
	}
	blocks, err := newBlockCache(store, o.CacheDir, 1<<20, o.CacheBytes, 2)
	if err != nil {
		return nil, fmt.Errorf("tiering: block cache: %w", err)
	}
	return &ArchiveReader{store: store, prefix: o.Prefix, blocks: blocks, files: newOpenFiles(o.OpenFiles),
		cursors: newParkedCursors(parkedCursorsMax), keys: o.Keys, logger: event.OrDiscard(o.Logger), retryInterval: o.RetryInterval}, nil
}

// Close ends the cursors kept between pages. Follow closes them too when
// its context ends.
func (a *ArchiveReader) Close() { a.cursors.closeAll() }

// Span implements reader.ArchiveSource.
func (a *ArchiveReader) Span() reader.ArchiveSpan {
	a.mu.Lock()
	defer a.mu.Unlock()
	return reader.ArchiveSpan{Known: a.mu.known, First: a.mu.head.First, Loaded: a.loadedLocked()}
}

// Archived is [first, loaded): the archive's offsets as far as the
// manifest is loaded.
func (a *ArchiveReader) Archived() (uint64, uint64) {
	span := a.Span()
	return span.First, span.Loaded
}

// loadedLocked is the end of the contiguous entries from head.First.
func (a *ArchiveReader) loadedLocked() uint64 {
	if n := len(a.mu.entries); n > 0 {
		return a.mu.entries[n-1].End
	}
	return a.mu.head.First
}

// Follow loads the manifest up to the head and again at every move of the
// head (and, while a segment fails to load, every RetryInterval), until
// ctx ends; then it closes the parked cursors.
func (a *ArchiveReader) Follow(ctx context.Context, cli *clientv3.Client) {
	defer a.Close()
	for ctx.Err() == nil {
		resp, err := cli.Get(ctx, keys.TieringHead)
		if err == nil {
			if len(resp.Kvs) > 0 {
				a.noteHead(ctx, resp.Kvs[0].Value)
			}
			a.watchHead(ctx, cli, resp.Header.Revision)
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

func (a *ArchiveReader) watchHead(ctx context.Context, cli *clientv3.Client, revision int64) {
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	watch := cli.Watch(ctx, keys.TieringHead, clientv3.WithRev(revision+1))
	for {
		var retry <-chan time.Time
		if !a.complete() {
			retry = time.After(a.retryInterval)
		}
		select {
		case resp, ok := <-watch:
			if !ok || resp.Err() != nil {
				return
			}
			for _, ev := range resp.Events {
				if ev.Type == clientv3.EventTypePut {
					a.noteHead(ctx, ev.Kv.Value)
				}
			}
		case <-retry:
			a.load(ctx)
		case <-ctx.Done():
			return
		}
	}
}

// complete reports whether the entries reach the head's T.
func (a *ArchiveReader) complete() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.loadedLocked() >= a.mu.head.T
}

// noteHead records a head read from etcd (T never decreases: an older one
// is ignored) and loads the manifest up to it.
func (a *ArchiveReader) noteHead(ctx context.Context, value []byte) {
	head, err := DecodeHead(value)
	if err != nil {
		a.logger.Warn("tiering: the archive's head does not decode", "err", err)
		return
	}
	a.mu.Lock()
	switch {
	case !a.mu.known || head.First != a.mu.head.First:
		a.mu.known, a.mu.head, a.mu.entries = true, head, nil
	case head.T > a.mu.head.T:
		a.mu.head = head
	}
	a.mu.Unlock()
	a.load(ctx)
}

// load extends the entries towards the head's T: by the one segment the
// head names when it is the next one, else by a listing of the manifest,
// loading the segments from where the entries end, in order, until one
// fails. It reports whether the entries reach T.
func (a *ArchiveReader) load(ctx context.Context) bool {
	a.mu.Lock()
	head, loaded := a.mu.head, a.loadedLocked()
	a.mu.Unlock()
	if loaded >= head.T {
		return true
	}
	if head.LastManifest == joinKey(a.prefix, manifestKey(loaded, head.T)) {
		if e, err := a.loadSegment(ctx, head.LastManifest); err == nil {
			return a.install(head, []ManifestEntry{e})
		}
	}
	entries, err := a.loadFrom(ctx, loaded)
	if err != nil {
		a.logger.Warn("tiering: cannot load the archive's manifest; retrying", "loaded", loaded, "t", head.T, "err", err)
	}
	return a.install(head, entries)
}

func (a *ArchiveReader) loadSegment(ctx context.Context, key string) (ManifestEntry, error) {
	raw, err := a.store.Get(ctx, key)
	if err != nil {
		return ManifestEntry{}, err
	}
	e, err := DecodeManifest(raw)
	if err != nil {
		return ManifestEntry{}, fmt.Errorf("%s: %w", key, err)
	}
	if want := path.Base(manifestKey(e.First, e.End)); path.Base(key) != want {
		return ManifestEntry{}, fmt.Errorf("%s: holds the segment of [%d, %d)", key, e.First, e.End)
	}
	return e, nil
}

// loadFrom lists the manifest and loads, in offset order, the segments
// that end above from (their names say their ranges), up to the first
// that fails: it returns those loaded before, and the error.
func (a *ArchiveReader) loadFrom(ctx context.Context, from uint64) ([]ManifestEntry, error) {
	dir := joinKey(a.prefix, ManifestDir) + "/"
	objects, err := a.store.List(ctx, dir)
	if err != nil {
		return nil, err
	}
	var out []ManifestEntry
	for _, o := range objects {
		if !strings.HasSuffix(o.Key, ".json") {
			continue
		}
		var first, last uint64
		if _, err := fmt.Sscanf(path.Base(o.Key), "%d-%d.json", &first, &last); err == nil && last < from {
			continue
		}
		e, err := a.loadSegment(ctx, o.Key)
		if err != nil {
			return out, err
		}
		out = append(out, e)
	}
	return out, nil
}

// install adds the loaded entries that continue the contiguous run from
// head.First, up to head.T; a segment past T (published but not
// committed) or after a gap waits for a later load. It reports whether
// the run reaches head.T.
func (a *ArchiveReader) install(head Head, loaded []ManifestEntry) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if head.T < a.mu.head.T || head.First != a.mu.head.First {
		head = a.mu.head // a newer head came meanwhile
	}
	all := append(slices.Clone(a.mu.entries), loaded...)
	sort.SliceStable(all, func(i, j int) bool { return all[i].First < all[j].First })
	var run []ManifestEntry
	next := head.First
	for _, e := range all {
		if e.First == next && e.End <= head.T {
			run = append(run, e)
			next = e.End
		}
	}
	a.mu.head, a.mu.entries = head, run
	return next >= head.T
}

// entryAt is the entry holding offset.
func (a *ArchiveReader) entryAt(offset uint64) (ManifestEntry, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	i := sort.Search(len(a.mu.entries), func(i int) bool { return a.mu.entries[i].End > offset })
	if i == len(a.mu.entries) || a.mu.entries[i].First > offset {
		return ManifestEntry{}, false
	}
	return a.mu.entries[i], true
}

// FilesWithin returns the manifest entries of the loaded files wholly
// inside [first, end), in offset order (for Arrow Flight, which hands
// their objects to clients).
func (a *ArchiveReader) FilesWithin(first, end uint64) []ManifestEntry {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []ManifestEntry
	for _, e := range a.mu.entries {
		if e.First >= first && e.End <= end {
			out = append(out, e)
		}
	}
	return out
}

var _ reader.ArchiveSource = (*ArchiveReader)(nil)
