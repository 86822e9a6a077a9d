package tiering

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"orderlog/internal/event"
	"orderlog/internal/keys"
	"orderlog/proto/orderlogpb"
	"orderlog/reader"
	"orderlog/tiering/objstore"
	"orderlog/tiering/parquetfile"
)

// ArchiveReader serves reads of the archive (reader.ArchiveSource): it
// follows the head in etcd, keeps the manifest's entries in memory, and
// reads the files through a block cache on the local disk.
type ArchiveReader struct {
	store  objstore.Store
	prefix string
	blocks *blockCache
	logger *slog.Logger

	mu struct {
		sync.Mutex
		head    Head
		entries []ManifestEntry // contiguous from head.First, in offset order
		files   map[string]*parquetfile.File
	}
}

// ReaderOptions configure an ArchiveReader.
type ReaderOptions struct {
	Prefix string
	// CacheDir holds the block cache (emptied at the start), CacheBytes
	// bounds it. Defaults: 1 GiB, blocks of 1 MiB, 2 read ahead.
	CacheDir   string
	CacheBytes int64
	Logger     *slog.Logger
}

// NewArchiveReader returns a reader of store's archive; call Follow.
func NewArchiveReader(store objstore.Store, o ReaderOptions) (*ArchiveReader, error) {
	if o.CacheBytes <= 0 {
		o.CacheBytes = 1 << 30
	}
	blocks, err := newBlockCache(store, o.CacheDir, 1<<20, o.CacheBytes, 2)
	if err != nil {
		return nil, fmt.Errorf("tiering: block cache: %w", err)
	}
	a := &ArchiveReader{store: store, prefix: o.Prefix, blocks: blocks, logger: event.OrDiscard(o.Logger)}
	a.mu.files = map[string]*parquetfile.File{}
	return a, nil
}

// Archived is [first, t) as far as the manifest is loaded.
func (a *ArchiveReader) Archived() (uint64, uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.mu.entries) == 0 {
		return a.mu.head.First, a.mu.head.First
	}
	return a.mu.entries[0].First, a.mu.entries[len(a.mu.entries)-1].End
}

// Follow loads the manifest up to the head and again at every move of the
// head, until ctx ends.
func (a *ArchiveReader) Follow(ctx context.Context, cli *clientv3.Client) {
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
	for resp := range cli.Watch(ctx, keys.TieringHead, clientv3.WithRev(revision+1)) {
		if resp.Err() != nil {
			return
		}
		for _, ev := range resp.Events {
			if ev.Type == clientv3.EventTypePut {
				a.noteHead(ctx, ev.Kv.Value)
			}
		}
	}
}

// noteHead loads the manifest's entries up to a new head: the one segment
// the head names when it moved by one file, else the whole listing.
func (a *ArchiveReader) noteHead(ctx context.Context, value []byte) {
	head, err := DecodeHead(value)
	if err != nil {
		a.logger.Warn("tiering: the archive's head does not decode", "err", err)
		return
	}
	a.mu.Lock()
	known := a.mu.head
	n := len(a.mu.entries)
	a.mu.Unlock()
	if head.T <= known.T && n > 0 {
		return
	}
	var loaded []ManifestEntry
	if head.Files == known.Files+1 && n > 0 {
		e, err := a.loadSegment(ctx, head.LastManifest)
		if err == nil {
			loaded = []ManifestEntry{e}
		}
	}
	if loaded == nil {
		if loaded, err = a.loadAll(ctx); err != nil {
			a.logger.Warn("tiering: cannot load the archive's manifest", "err", err)
			return
		}
	}
	a.install(head, loaded)
}

func (a *ArchiveReader) loadSegment(ctx context.Context, key string) (ManifestEntry, error) {
	raw, err := a.store.Get(ctx, key)
	if err != nil {
		return ManifestEntry{}, err
	}
	return DecodeManifest(raw)
}

// loadAll lists and loads every manifest segment.
func (a *ArchiveReader) loadAll(ctx context.Context) ([]ManifestEntry, error) {
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
		e, err := a.loadSegment(ctx, o.Key)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", o.Key, err)
		}
		out = append(out, e)
	}
	return out, nil
}

// install adds entries below the head's T to the contiguous run from
// head.First; a segment past T (published but not committed) waits.
func (a *ArchiveReader) install(head Head, loaded []ManifestEntry) {
	a.mu.Lock()
	defer a.mu.Unlock()
	all := append(slices.Clone(a.mu.entries), loaded...)
	sort.Slice(all, func(i, j int) bool { return all[i].First < all[j].First })
	var run []ManifestEntry
	next := head.First
	for _, e := range all {
		if e.First == next && e.End <= head.T {
			run = append(run, e)
			next = e.End
		}
	}
	a.mu.head, a.mu.entries = head, run
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

// open opens an entry's file (once), reading it through the block cache.
func (a *ArchiveReader) open(ctx context.Context, e ManifestEntry) (*parquetfile.File, error) {
	a.mu.Lock()
	f, ok := a.mu.files[e.Object]
	a.mu.Unlock()
	if ok {
		return f, nil
	}
	f, err := parquetfile.Open(&cachedObject{cache: a.blocks, object: e.Object, size: e.Bytes}, e.Bytes)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", e.Object, err)
	}
	if m := f.Meta(); m.First != e.First || m.End != e.End || m.Rows != e.Rows || m.Digest != e.Digest {
		return nil, fmt.Errorf("%s: its footer says [%d, %d) with %d rows, the manifest [%d, %d) with %d", e.Object, m.First, m.End, m.Rows, e.First, e.End, e.Rows)
	}
	a.mu.Lock()
	a.mu.files[e.Object] = f
	a.mu.Unlock()
	return f, nil
}

// errStop ends a file's read where the visitor stopped.
var errStop = errors.New("tiering: the reader's page is full")

// Scan implements reader.ArchiveSource.
func (a *ArchiveReader) Scan(ctx context.Context, from, to uint64, hint reader.Filter, visit func(*orderlogpb.StoredMessage, *orderlogpb.SkippedRange) bool) (uint64, error) {
	cursor := from
	for cursor < to {
		e, ok := a.entryAt(cursor)
		if !ok {
			return cursor, fmt.Errorf("tiering: no archive file holds offset %d", cursor)
		}
		next, stopped, err := a.scanFile(ctx, e, cursor, min(to, e.End), hint, visit)
		if err != nil || stopped {
			return next, err
		}
		cursor = next
	}
	return cursor, nil
}

// scanFile visits [from, to) within one file: its rows between its holes.
func (a *ArchiveReader) scanFile(ctx context.Context, e ManifestEntry, from, to uint64, hint reader.Filter,
	visit func(*orderlogpb.StoredMessage, *orderlogpb.SkippedRange) bool) (uint64, bool, error) {
	skipRows := !mayMatch(e, hint)
	var f *parquetfile.File
	if !skipRows {
		var err error
		if f, err = a.open(ctx, e); err != nil {
			return from, false, err
		}
		skipRows = !f.MayContainKey(hint.Topic, hint.Key)
	}
	pos := from
	rows := func(end uint64) (bool, error) {
		if skipRows || pos >= end {
			pos = max(pos, end)
			return false, nil
		}
		var stopAt uint64
		err := f.Read(ctx, pos, end, func(m *orderlogpb.StoredMessage) error {
			if !visit(m, nil) {
				stopAt = m.Offset
				return errStop
			}
			return nil
		})
		if errors.Is(err, errStop) {
			pos = stopAt
			return true, nil
		}
		pos = end
		return false, err
	}
	for _, h := range e.Holes {
		if h.End <= pos || h.First >= to {
			continue
		}
		if stopped, err := rows(h.First); stopped || err != nil {
			return pos, stopped, err
		}
		hole := &orderlogpb.SkippedRange{First: max(h.First, pos), End: min(h.End, to)}
		if !visit(nil, hole) {
			return pos, true, nil
		}
		pos = hole.End
	}
	stopped, err := rows(to)
	return pos, stopped, err
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

// cachedObject reads an object through the block cache.
type cachedObject struct {
	cache  *blockCache
	object string
	size   int64
}

func (o *cachedObject) ReadAt(p []byte, off int64) (int, error) {
	return o.cache.readAt(context.Background(), o.object, o.size, p, off)
}

var _ reader.ArchiveSource = (*ArchiveReader)(nil)
