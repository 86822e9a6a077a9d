package tiering

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"orderlog/internal/apierr"
	"orderlog/tiering/parquetfile"
)

// ErrFooterMismatch is returned (wrapped, with what differs) when an
// archive file's footer disagrees with its manifest segment: its range,
// row count, holes or digest. The file is not served: reads of its range
// fail rather than answer what the manifest does not vouch for.
var ErrFooterMismatch = errors.New("tiering: an archive file's footer disagrees with its manifest segment")

// openFiles keeps the archive files opened for reads (their footers and
// page indexes in memory), least recently used out past a count. A File
// holds memory only (its reads go through the block cache), so one
// dropped here is closed once the reads using it end.
type openFiles struct {
	limit int
	mu    struct {
		sync.Mutex
		order    *list.List // of *openFile, most recent first
		byObject map[string]*list.Element
	}
}

type openFile struct {
	object string
	file   *parquetfile.File
}

func newOpenFiles(limit int) *openFiles {
	o := &openFiles{limit: limit}
	o.mu.order, o.mu.byObject = list.New(), map[string]*list.Element{}
	return o
}

func (o *openFiles) get(object string) (*parquetfile.File, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	e, ok := o.mu.byObject[object]
	if !ok {
		return nil, false
	}
	o.mu.order.MoveToFront(e)
	return e.Value.(*openFile).file, true
}

func (o *openFiles) add(object string, f *parquetfile.File) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := o.mu.byObject[object]; ok {
		return
	}
	o.mu.byObject[object] = o.mu.order.PushFront(&openFile{object, f})
	for o.mu.order.Len() > o.limit {
		old := o.mu.order.Remove(o.mu.order.Back()).(*openFile)
		delete(o.mu.byObject, old.object)
	}
}

func (o *openFiles) len() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.mu.order.Len()
}

// open returns an entry's file, opened through the block cache and
// checked against the entry (once while it stays open).
func (a *ArchiveReader) open(ctx context.Context, e ManifestEntry) (*parquetfile.File, error) {
	if f, ok := a.files.get(e.Object); ok {
		return f, nil
	}
	obj := &cachedObject{cache: a.blocks, object: e.Object, size: e.Bytes}
	f, err := parquetfile.OpenContext(ctx, obj, e.Bytes, parquetfile.WithKeys(a.keys))
	var keyErr *parquetfile.KeyError
	if errors.As(err, &keyErr) {
		// The node's configuration, not the object store: INTERNAL, not
		// the UNAVAILABLE (retry) other archive failures answer.
		return nil, apierr.New(apierr.Internal, "archive file %s: %v", e.Object, keyErr)
	}
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", e.Object, err)
	}
	if err := checkFooter(e, f.Meta()); err != nil {
		return nil, err
	}
	a.files.add(e.Object, f)
	return f, nil
}

// checkFooter compares a file's footer with its manifest segment.
func checkFooter(e ManifestEntry, m parquetfile.Meta) error {
	holes := make([]parquetfile.Range, len(e.Holes))
	for i, h := range e.Holes {
		holes[i] = parquetfile.Range{First: h.First, End: h.End}
	}
	var differs string
	switch {
	case m.First != e.First || m.End != e.End:
		differs = fmt.Sprintf("range [%d, %d), the manifest's [%d, %d)", m.First, m.End, e.First, e.End)
	case m.Rows != e.Rows:
		differs = fmt.Sprintf("%d rows, the manifest's %d", m.Rows, e.Rows)
	case !slices.Equal(m.Holes, holes) && (len(m.Holes) > 0 || len(holes) > 0):
		differs = fmt.Sprintf("holes %v, the manifest's %v", m.Holes, holes)
	case m.Digest != e.Digest:
		differs = fmt.Sprintf("digest %s, the manifest's %s", m.Digest, e.Digest)
	default:
		return nil
	}
	return fmt.Errorf("%w: %s: %s", ErrFooterMismatch, e.Object, differs)
}

// cachedObject reads an object through the block cache; a read through
// ReadAtContext stops waiting when its context ends.
type cachedObject struct {
	cache  *blockCache
	object string
	size   int64
}

func (o *cachedObject) ReadAt(p []byte, off int64) (int, error) {
	return o.cache.readAt(context.Background(), o.object, o.size, p, off)
}

func (o *cachedObject) ReadAtContext(ctx context.Context, p []byte, off int64) (int, error) {
	return o.cache.readAt(ctx, o.object, o.size, p, off)
}
