package walfs

import "errors"

// Mapper is implemented by files that can be mapped into memory read-only.
// The WAL store maps sealed segments and serves reads from the mapping
// without copying; a file that does not implement it (CrashFS's, ErrorFS's)
// or that fails to map is read with ReadAt.
type Mapper interface {
	// MapReadOnly maps the file's first size bytes read-only. The caller
	// must not let the file shrink below size while the mapping lives:
	// touching a mapped page past the end of the file is a fault.
	MapReadOnly(size int64) (Mapping, error)
}

// Mapping is a read-only view of a file's first bytes.
type Mapping interface {
	// Bytes is the mapped view; it must not be written, and must not be
	// touched after Close.
	Bytes() []byte
	// Close unmaps the view.
	Close() error
}

// ErrNoMapping is returned by MapReadOnly on systems without mmap, and for
// an empty size (mmap cannot map zero bytes).
var ErrNoMapping = errors.New("walfs: file cannot be mapped")

// MapReadOnly implements Mapper for the real filesystem (mmap_unix.go).
func (f osFile) MapReadOnly(size int64) (Mapping, error) { return mapFile(f.f, size) }
