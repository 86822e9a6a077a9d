// Package walfs is the filesystem the WAL store writes through: the real
// operating-system implementation and, for tests, a crashable in-memory one
// that can lose unsynced data and inject write and sync errors.
//
// ErrorFS wraps any FS (the OS's, or a CrashFS) and disturbs operations by
// rules: a rule names operation kinds (Op: open, create, read, write, sync,
// truncate, remove, rename, list, …), optionally a path (Glob), a Trigger
// (Always, Nth, Once, FromNth, or Probability from a seed, which repeats
// its decisions for the same sequence of calls) and an Action (Fail with
// an errno such as EIO or ENOSPC, Delay through a replaceable sleep
// function, or CorruptRead). Every injected error is an *os.PathError
// around an *InjectedError, so errors.Is(err, ErrInjected) tells it from a
// real one. Rules can be added and removed while the FS is in use.
//
// The interface is deliberately small: the store only appends to files, reads
// them at offsets, truncates a torn tail, syncs data and directories, and
// renames whole files into place.
package walfs

import (
	"io"
	"os"
	"sort"

	"orderlog/internal/fileutil"
)

// File is an open file. Writes append at the end of the file.
type File interface {
	io.ReaderAt
	io.Writer
	io.Closer
	// Sync makes the file's data durable (fdatasync on Linux; see
	// fileutil.Fdatasync for other systems).
	Sync() error
	// Truncate cuts the file to size bytes.
	Truncate(size int64) error
	// Size is the file's current length.
	Size() (int64, error)
	// DropCache advises the OS that the file's cached pages, already
	// synced, will not be needed soon (posix_fadvise DONTNEED). Advisory:
	// an error changes nothing but the page cache.
	DropCache() error
	// Preallocate reserves disk blocks for the file's first size bytes
	// without changing its length (fallocate FALLOC_FL_KEEP_SIZE), so that
	// appends within them allocate nothing. Advisory: after an error,
	// appends allocate as they go.
	Preallocate(size int64) error
}

// FS is a directory-oriented filesystem.
type FS interface {
	// Create creates (or truncates) name for appending.
	Create(name string) (File, error)
	// OpenAppend opens an existing file for reading and appending.
	OpenAppend(name string) (File, error)
	// Open opens an existing file read-only.
	Open(name string) (File, error)
	Remove(name string) error
	Rename(oldName, newName string) error
	// List returns the names of the files in dir, sorted.
	List(dir string) ([]string, error)
	MkdirAll(dir string) error
	// SyncDir makes creations, renames and removals in dir durable.
	SyncDir(dir string) error
}

// OS is the real filesystem.
type OS struct{}

type osFile struct{ f *os.File }

func (o OS) Create(name string) (File, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

func (o OS) OpenAppend(name string) (File, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

func (o OS) Open(name string) (File, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

func (o OS) Remove(name string) error             { return os.Remove(name) }
func (o OS) Rename(oldName, newName string) error { return os.Rename(oldName, newName) }
func (o OS) MkdirAll(dir string) error            { return os.MkdirAll(dir, 0o755) }

func (o OS) List(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		if !e.IsDir() {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	return names, nil
}

func (o OS) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

func (f osFile) ReadAt(p []byte, off int64) (int, error) { return f.f.ReadAt(p, off) }
func (f osFile) Write(p []byte) (int, error)             { return f.f.Write(p) }
func (f osFile) Close() error                            { return f.f.Close() }
func (f osFile) Truncate(size int64) error               { return f.f.Truncate(size) }

// Sync uses fdatasync: the store never depends on file metadata other than
// the length, which fdatasync covers.
func (f osFile) Sync() error { return fileutil.Fdatasync(f.f) }

func (f osFile) DropCache() error { return fileutil.DropCache(f.f) }

func (f osFile) Preallocate(size int64) error { return fileutil.Preallocate(f.f, size) }

func (f osFile) Size() (int64, error) {
	st, err := f.f.Stat()
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}
