package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/parquet/file"
	clientv3 "go.etcd.io/etcd/client/v3"

	"orderlog/bench/internal/benchutil"
	"orderlog/proto/orderlogpb"
	"orderlog/reader"
	"orderlog/tiering"
	"orderlog/tiering/objstore"
	"orderlog/tiering/parquetfile"
)

// byteRange is one ranged read of an object.
type byteRange struct {
	object   string
	off, len int64
}

// countingStore is an objstore.Store that records every ranged read.
type countingStore struct {
	objstore.Store
	mu     sync.Mutex
	ranges []byteRange
}

func (s *countingStore) GetRange(ctx context.Context, key string, off, n int64) ([]byte, error) {
	data, err := s.Store.GetRange(ctx, key, off, n)
	s.mu.Lock()
	s.ranges = append(s.ranges, byteRange{key, off, int64(len(data))})
	s.mu.Unlock()
	return data, err
}

// take returns the ranges recorded since the last take.
func (s *countingStore) take() []byteRange {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.ranges
	s.ranges = nil
	return out
}

// objectReader reads an object through a counting store, uncached: what
// parquetfile itself asks for, range by range.
type objectReader struct {
	store  *countingStore
	object string
}

func (r objectReader) ReadAt(p []byte, off int64) (int, error) {
	data, err := r.store.GetRange(context.Background(), r.object, off, int64(len(p)))
	return copy(p, data), err
}

// regions are the byte ranges of an object's column chunks, from its
// Parquet metadata: data pages (page headers included) and dictionary
// pages. Everything else (footer, page indexes, bloom filters) is index.
type regions struct{ data, dict [][2]int64 }

func loadRegions(path string) (regions, error) {
	pf, err := file.OpenParquetFile(path, false)
	if err != nil {
		return regions{}, err
	}
	defer pf.Close()
	var rs regions
	md := pf.MetaData()
	for g := range md.NumRowGroups() {
		rg := md.RowGroup(g)
		for c := range rg.NumColumns() {
			col, err := rg.ColumnChunk(c)
			if err != nil {
				return regions{}, err
			}
			start, data := col.DataPageOffset(), col.DataPageOffset()
			if col.HasDictionaryPage() && col.DictionaryPageOffset() > 0 {
				start = col.DictionaryPageOffset()
				rs.dict = append(rs.dict, [2]int64{start, data})
			}
			rs.data = append(rs.data, [2]int64{data, start + col.TotalCompressedSize()})
		}
	}
	return rs, nil
}

func overlap(r byteRange, within [][2]int64) int64 {
	var n int64
	for _, w := range within {
		lo, hi := max(r.off, w[0]), min(r.off+r.len, w[1])
		if hi > lo {
			n += hi - lo
		}
	}
	return n
}

// fetched is what a query read: all bytes, and those in data and
// dictionary pages.
type fetched struct{ total, data, dict int64 }

func classify(ranges []byteRange, byObject map[string]regions) fetched {
	var f fetched
	for _, r := range ranges {
		f.total += r.len
		if rs, ok := byObject[r.object]; ok {
			f.data += overlap(r, rs.data)
			f.dict += overlap(r, rs.dict)
		}
	}
	return f
}

// queryResult is one key's query, both ways.
type queryResult struct {
	matches int
	// format: parquetfile.File.Query on every file, each opened over the
	// uncached store: exactly what the format's reader reads.
	format        fetched
	formatLatency float64 // ms, median of rounds (footers read each time)
	// scan: tiering.ArchiveReader.Scan with reader.Filter{Key}, as a node
	// serves a query below the log start: GETs of 1 MiB blocks into its
	// block cache (cold), then the latency with the cache warm.
	scan                  fetched
	scanCold, scanWarm    float64 // ms
	scanGets, scanMatches int
}

// archiveQuery opens the archive in-process as a node does and queries it.
type archiveQuery struct {
	store    *countingStore
	root     string // the file store's directory
	archive  *tiering.ArchiveReader
	entries  []tiering.ManifestEntry
	regions  map[string]regions
	first, t uint64
}

func openArchiveQuery(ctx context.Context, root, etcdAddr, cacheDir string) (*archiveQuery, func(), error) {
	base, err := objstore.Open(ctx, "file://"+root, objstore.Options{})
	if err != nil {
		return nil, nil, err
	}
	q := &archiveQuery{store: &countingStore{Store: base}, root: root, regions: map[string]regions{}}
	if q.archive, err = tiering.NewArchiveReader(q.store, tiering.ReaderOptions{CacheDir: cacheDir}); err != nil {
		return nil, nil, err
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + etcdAddr}, DialTimeout: 5 * time.Second})
	if err != nil {
		return nil, nil, err
	}
	followCtx, stopFollow := context.WithCancel(ctx)
	go q.archive.Follow(followCtx, cli)
	closeAll := func() { stopFollow(); cli.Close() }
	head, err := tiering.ReadHead(ctx, cli)
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	deadline := time.Now().Add(time.Minute)
	for {
		if q.first, q.t = q.archive.Archived(); q.t >= head.T || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if q.t < head.T {
		closeAll()
		return nil, nil, fmt.Errorf("the archive reader loaded [%d, %d), the head says T=%d", q.first, q.t, head.T)
	}
	if err := q.loadEntries(ctx); err != nil {
		closeAll()
		return nil, nil, err
	}
	return q, closeAll, nil
}

// loadEntries reads the manifest and each file's page layout.
func (q *archiveQuery) loadEntries(ctx context.Context) error {
	objects, err := q.store.List(ctx, tiering.ManifestDir+"/")
	if err != nil {
		return err
	}
	for _, o := range objects {
		if !strings.HasSuffix(o.Key, ".json") {
			continue
		}
		raw, err := q.store.Get(ctx, o.Key)
		if err != nil {
			return err
		}
		e, err := tiering.DecodeManifest(raw)
		if err != nil {
			return err
		}
		if q.regions[e.Object], err = loadRegions(filepath.Join(q.root, e.Object)); err != nil {
			return err
		}
		q.entries = append(q.entries, e)
	}
	q.store.take()
	return nil
}

// query runs one key's query both ways, the format's on every file, the
// Scan on [first, scanEnd); rounds times for the latencies.
func (q *archiveQuery) query(ctx context.Context, key []byte, rounds int, scanEnd uint64) (queryResult, error) {
	var res queryResult
	var formatMs []float64
	for r := range rounds {
		start := time.Now()
		matches, err := q.formatQuery(ctx, key)
		if err != nil {
			return res, err
		}
		formatMs = append(formatMs, msSince(start))
		ranges := q.store.take()
		if r == 0 {
			res.matches, res.format = matches, classify(ranges, q.regions)
		}
	}
	res.formatLatency = benchutil.Median(formatMs)
	var warm []float64
	for r := range rounds + 1 {
		start := time.Now()
		matches, err := q.scan(ctx, key, scanEnd)
		if err != nil {
			return res, err
		}
		elapsed := msSince(start)
		time.Sleep(200 * time.Millisecond) // the cache's read-ahead GETs land
		ranges := q.store.take()
		if r == 0 {
			res.scanCold, res.scan, res.scanGets, res.scanMatches = elapsed, classify(ranges, q.regions), len(ranges), matches
		} else {
			warm = append(warm, elapsed)
		}
	}
	res.scanWarm = benchutil.Median(warm)
	return res, nil
}

// formatQuery opens every file over the uncached store and queries it.
func (q *archiveQuery) formatQuery(ctx context.Context, key []byte) (int, error) {
	matches := 0
	for _, e := range q.entries {
		f, err := parquetfile.Open(objectReader{q.store, e.Object}, e.Bytes)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", e.Object, err)
		}
		if !f.MayContainKey("", key) {
			continue
		}
		err = f.Query(ctx, "", key, func(*orderlogpb.StoredMessage) error { matches++; return nil })
		if err != nil {
			return 0, err
		}
	}
	return matches, nil
}

// scan is a node's query below the log start: Scan with the key as hint,
// counting the visited messages that match (Scan may visit others).
func (q *archiveQuery) scan(ctx context.Context, key []byte, end uint64) (int, error) {
	matches := 0
	_, err := q.archive.Scan(ctx, q.first, end, reader.Filter{Key: key}, func(item reader.ArchiveItem) bool {
		if m := item.Message; m != nil && string(m.Message.GetKey()) == string(key) {
			matches++
		}
		return true
	})
	return matches, err
}

func msSince(t time.Time) float64 { return float64(time.Since(t).Microseconds()) / 1000 }
