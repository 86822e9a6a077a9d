package tiering

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"

	"orderlog/tiering/objstore"
	"orderlog/tiering/parquetfile"
)

// ErrConflict halts the worker: an object under a planned key holds other
// rows than the log. Nothing is ever overwritten; an operator looks.
var ErrConflict = errors.New("tiering: an archive object holds other content than the log")

// ErrLogStartPassed: retention deleted offsets the archive has not taken
// yet, so the archive cannot go on from T.
var ErrLogStartPassed = errors.New("tiering: the log start passed the archived watermark")

// built is a finished local file of a planned range.
type built struct {
	meta  parquetfile.Meta
	size  int64
	entry ManifestEntry
}

func newBuilt(b *build, p Plan, meta parquetfile.Meta, size int64) built {
	holes := make([]Hole, len(meta.Holes))
	for i, h := range meta.Holes {
		holes[i] = Hole{h.First, h.End}
	}
	return built{meta: meta, size: size, entry: ManifestEntry{Version: manifestVersion, First: p.First, End: p.End, Object: p.Object,
		Rows: meta.Rows, Bytes: size, Holes: holes, Digest: meta.Digest, FirstIngestMicros: b.minMicro, LastIngestMicros: b.maxMicro}}
}

// uploaded is what upload put, or found and adopted, under a planned key.
type uploaded struct {
	size int64
	// adoptedInClear: an object in clear was already there and adopted
	// (an attempt from before encryption was turned on, or a worker
	// without the key file, or with --archive-plaintext).
	adoptedInClear bool
}

// upload puts the file under its planned key and returns the object's
// size. An object already there (this plan's earlier attempt, or a deposed
// worker's) is adopted when its footer says it holds the same rows;
// otherwise ErrConflict. An encrypted object needs its key in keys (else
// ErrConflict naming the key id: nothing is overwritten).
func upload(ctx context.Context, store objstore.Store, keys *parquetfile.Keys, b *build, f built) (uploaded, error) {
	err := store.PutIfAbsent(ctx, f.entry.Object, b.file, f.size)
	if !errors.Is(err, objstore.ErrExists) {
		return uploaded{size: f.size}, err
	}
	size, err := store.Size(ctx, f.entry.Object)
	if err != nil {
		return uploaded{}, err
	}
	there, err := parquetfile.Open(&objectReaderAt{ctx: ctx, store: store, key: f.entry.Object}, size, parquetfile.WithKeys(keys))
	if err != nil {
		return uploaded{}, fmt.Errorf("%w: %s: %v", ErrConflict, f.entry.Object, err)
	}
	if m := there.Meta(); m.First != f.meta.First || m.End != f.meta.End || m.Rows != f.meta.Rows || m.Digest != f.meta.Digest ||
		!slices.Equal(m.Holes, f.meta.Holes) {
		return uploaded{}, fmt.Errorf("%w: %s holds [%d, %d) with %d rows and digest %s; the log's are [%d, %d), %d rows, %s",
			ErrConflict, f.entry.Object, m.First, m.End, m.Rows, m.Digest, f.meta.First, f.meta.End, f.meta.Rows, f.meta.Digest)
	}
	return uploaded{size: size, adoptedInClear: !there.Encrypted()}, nil
}

// putManifest puts the file's manifest segment; one already there must
// be the same entry but for the object's size (a different writer version
// may encode the same rows in other bytes).
func putManifest(ctx context.Context, store objstore.Store, key string, e ManifestEntry) (ManifestEntry, error) {
	body, err := encodeManifest(e)
	if err != nil {
		return ManifestEntry{}, err
	}
	err = store.PutIfAbsent(ctx, key, bytes.NewReader(body), int64(len(body)))
	if !errors.Is(err, objstore.ErrExists) {
		return e, err
	}
	raw, err := store.Get(ctx, key)
	if err != nil {
		return ManifestEntry{}, err
	}
	there, err := DecodeManifest(raw)
	if err != nil {
		return ManifestEntry{}, fmt.Errorf("%w: %s: %v", ErrConflict, key, err)
	}
	// The same rows (digest) may differ in the object's size (another
	// writer version) and in the ingest bounds (an earlier version's
	// first/last rows', not min/max); both are derived, not content.
	mine := e
	mine.Bytes = there.Bytes
	mine.FirstIngestMicros, mine.LastIngestMicros = there.FirstIngestMicros, there.LastIngestMicros
	if a, b := mustEncode(there), mustEncode(mine); !bytes.Equal(a, b) {
		return ManifestEntry{}, fmt.Errorf("%w: %s holds %s, the log's file is %s", ErrConflict, key, a, b)
	}
	return there, nil
}

func mustEncode(e ManifestEntry) []byte {
	b, _ := encodeManifest(e)
	return b
}

// objectReaderAt reads an object by ranges (for a footer check).
type objectReaderAt struct {
	ctx   context.Context
	store objstore.Store
	key   string
}

func (r *objectReaderAt) ReadAt(p []byte, off int64) (int, error) {
	b, err := r.store.GetRange(r.ctx, r.key, off, int64(len(p)))
	if err != nil {
		return 0, err
	}
	return copy(p, b), nil
}
