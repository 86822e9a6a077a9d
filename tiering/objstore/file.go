package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
)

// stagingDir is the file backend's hidden directory for bytes not yet linked
// under their key. checkKey makes sure no key can name it.
const stagingDir = ".tmp"

// fileStore keeps each object as a file ROOT/KEY. Objects appear by
// os.Link, which fails when the name exists: atomic, and never overwrites.
// A key cannot be both an object and a directory of other keys ("a" and
// "a/b"), unlike in S3.
type fileStore struct {
	root string // absolute
}

func openFile(dir string) (*fileStore, error) {
	if dir == "" {
		return nil, errors.New("objstore: file:// needs a path")
	}
	root, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("objstore: %w", err)
	}
	if err := os.MkdirAll(filepath.Join(root, stagingDir), 0o755); err != nil {
		return nil, fmt.Errorf("objstore: open %s: %w", root, err)
	}
	return &fileStore{root: root}, nil
}

func (s *fileStore) Describe() string { return "file://" + s.root }

func (s *fileStore) path(key string) string {
	return filepath.Join(s.root, filepath.FromSlash(key))
}

// PutIfAbsent stages the bytes in ROOT/.tmp, fsyncs them, links them to the
// key's name, and fsyncs the directories up to the root so the new name
// survives a crash. The staged name is removed whatever happens.
//
// A body that is a whole local file on the store's filesystem (an *os.File
// of exactly size bytes, still under its name) is not copied: the file
// itself is synced and linked, under a staged name and then the key's, so
// the object is that file. The caller must not write to it afterwards (the
// tiering worker puts a finished file and removes its own name). Any other
// body, or a file on another filesystem, is copied.
func (s *fileStore) PutIfAbsent(ctx context.Context, key string, body io.ReaderAt, size int64) error {
	if err := checkKey(key); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	staged, err := s.stageLink(body, size)
	if err == nil && staged == "" {
		staged, err = s.stage(body, size)
	}
	if err != nil {
		return fmt.Errorf("objstore: put %s: %w", key, err)
	}
	defer os.Remove(staged)
	return s.link(staged, key)
}

// stageLink links body, when it is a whole local file on the store's
// filesystem, to a new name in the staging directory, and syncs it. It
// returns "" (and no error) when body cannot be linked: then it is copied.
func (s *fileStore) stageLink(body io.ReaderAt, size int64) (string, error) {
	f, ok := body.(*os.File)
	if !ok {
		return "", nil
	}
	info, err := f.Stat()
	if err != nil || !info.Mode().IsRegular() || info.Size() != size {
		return "", nil
	}
	staged := filepath.Join(s.root, stagingDir, fmt.Sprintf("link-%d-%d", os.Getpid(), linkSeq.Add(1)))
	if err := os.Link(f.Name(), staged); err != nil {
		return "", nil // another filesystem, no such name any more, no hard links: copy
	}
	// The name may have been given to another file since f was opened:
	// only f itself may become the object.
	if linked, err := os.Lstat(staged); err != nil || !os.SameFile(info, linked) {
		os.Remove(staged)
		return "", nil
	}
	if err := f.Sync(); err != nil {
		os.Remove(staged)
		return "", err
	}
	return staged, nil
}

// linkSeq numbers the staged links of this process.
var linkSeq atomic.Uint64

// stage writes size bytes of body to a new file in the staging directory,
// fsynced and closed, and returns its path.
func (s *fileStore) stage(body io.ReaderAt, size int64) (string, error) {
	f, err := os.CreateTemp(filepath.Join(s.root, stagingDir), "put-*")
	if err != nil {
		return "", err
	}
	written, err := io.Copy(f, io.NewSectionReader(body, 0, size))
	if err == nil && written != size {
		err = fmt.Errorf("body has %d bytes, want %d", written, size)
	}
	if err == nil {
		err = f.Sync()
	}
	if closeErr := f.Close(); err == nil {
		err = closeErr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}

// link gives the staged file the key's name unless that name exists.
func (s *fileStore) link(staged, key string) error {
	final := s.path(key)
	if err := os.MkdirAll(filepath.Dir(final), 0o755); err != nil {
		return fmt.Errorf("objstore: put %s: %w", key, err)
	}
	err := os.Link(staged, final)
	if errors.Is(err, fs.ErrExist) {
		return s.existsError(key, final)
	}
	if err != nil {
		return fmt.Errorf("objstore: put %s: %w", key, err)
	}
	return s.syncDirs(path.Dir(key))
}

func (s *fileStore) existsError(key, final string) error {
	if info, err := os.Stat(final); err == nil && info.IsDir() {
		return fmt.Errorf("objstore: put %s: a directory of other keys is there", key)
	}
	return fmt.Errorf("%s/%s: %w", s.Describe(), key, ErrExists)
}

// syncDirs fsyncs ROOT/dir and each of its parents up to ROOT, so that the
// new entry and any directories MkdirAll created are durable.
func (s *fileStore) syncDirs(dir string) error {
	for ; ; dir = path.Dir(dir) {
		if err := syncDir(s.path(dir)); err != nil {
			return fmt.Errorf("objstore: sync %s: %w", dir, err)
		}
		if dir == "." {
			return nil
		}
	}
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if closeErr := d.Close(); err == nil {
		err = closeErr
	}
	return err
}

func (s *fileStore) Get(ctx context.Context, key string) ([]byte, error) {
	f, size, err := s.open(ctx, key)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return s.readAt(f, key, 0, size)
}

func (s *fileStore) GetRange(ctx context.Context, key string, off, n int64) ([]byte, error) {
	if err := checkRange(key, off, n); err != nil {
		return nil, err
	}
	if n == 0 {
		return []byte{}, nil
	}
	f, size, err := s.open(ctx, key)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if off+n > size {
		return nil, shortRangeError(s.Describe()+"/"+key, off, n, max(size-off, 0))
	}
	return s.readAt(f, key, off, n)
}

func (s *fileStore) readAt(f *os.File, key string, off, n int64) ([]byte, error) {
	buf := make([]byte, n)
	if _, err := f.ReadAt(buf, off); err != nil {
		return nil, fmt.Errorf("objstore: read %s: %w", key, err)
	}
	return buf, nil
}

func (s *fileStore) Size(ctx context.Context, key string) (int64, error) {
	f, size, err := s.open(ctx, key)
	if err != nil {
		return 0, err
	}
	f.Close()
	return size, nil
}

// open opens the key's file and returns its size; a missing file or a
// directory is ErrNotFound.
func (s *fileStore) open(ctx context.Context, key string) (*os.File, int64, error) {
	if err := checkKey(key); err != nil {
		return nil, 0, err
	}
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	f, err := os.Open(s.path(key))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, 0, fmt.Errorf("%s/%s: %w", s.Describe(), key, ErrNotFound)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("objstore: open %s: %w", key, err)
	}
	info, err := f.Stat()
	if err == nil && info.IsDir() {
		err = fmt.Errorf("%s/%s: %w", s.Describe(), key, ErrNotFound)
	}
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	return f, info.Size(), nil
}

// List walks the directory that holds every key starting with prefix,
// skipping the staging directory, and sorts by key: a walk's order is not
// key order ("a/b" is walked before "a-c").
func (s *fileStore) List(ctx context.Context, prefix string) ([]Object, error) {
	if err := checkPrefix(prefix); err != nil {
		return nil, err
	}
	start := s.path(prefix[:strings.LastIndex(prefix, "/")+1])
	if _, err := os.Stat(start); errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	var objects []Object
	err := filepath.WalkDir(start, func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		key := filepath.ToSlash(strings.TrimPrefix(name, s.root+string(filepath.Separator)))
		if d.IsDir() && key == stagingDir {
			return filepath.SkipDir
		}
		if !d.Type().IsRegular() || !strings.HasPrefix(key, prefix) {
			return nil
		}
		info, err := d.Info()
		if err == nil {
			objects = append(objects, Object{Key: key, Size: info.Size()})
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("objstore: list %s: %w", prefix, err)
	}
	sort.Slice(objects, func(i, j int) bool { return objects[i].Key < objects[j].Key })
	return objects, nil
}
