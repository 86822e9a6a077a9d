package walfs

import (
	"errors"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
)

// Op names a filesystem operation for error injection.
type Op int

const (
	OpWrite Op = iota
	OpSync
	OpSyncDir
	OpCreate
	OpRename
	OpDropCache
	OpPreallocate
)

// ErrCrashed is returned by file handles opened before a simulated crash.
var ErrCrashed = errors.New("walfs: file handle from before a crash")

// ErrInjected is a convenient error for tests to inject.
var ErrInjected = errors.New("walfs: injected error")

// CrashFS is an in-memory filesystem that models what survives a power
// loss: file data survives only up to its last Sync, and directory entries
// (creations, renames, removals) only up to the last SyncDir of their
// directory. Crash() drops everything else. It is safe for concurrent use.
type CrashFS struct {
	mu sync.Mutex
	// files is the namespace as running processes see it.
	files map[string]*memNode
	// durable is the namespace as it would be after a crash.
	durable map[string]*memNode
	dirs    map[string]bool
	gen     int
	inject  func(op Op, name string) error
	// syncGate, while set, is what every file Sync waits on (HoldSyncs).
	syncGate chan struct{}
	rng      *rand.Rand
	torn     bool
}

type memNode struct {
	data []byte
	// synced is the durable content; bytes from dirtyFrom on differ or are
	// missing from it.
	synced    []byte
	dirtyFrom int
	// reserved is how many bytes from offset 0 have blocks reserved
	// (Preallocate); what lies beyond the length survives until a
	// Truncate, as on a real file system.
	reserved int64
}

// NewCrashFS returns an empty CrashFS. seed drives torn-write simulation.
func NewCrashFS(seed int64) *CrashFS {
	return &CrashFS{
		files:   map[string]*memNode{},
		durable: map[string]*memNode{},
		dirs:    map[string]bool{},
		rng:     rand.New(rand.NewSource(seed)),
	}
}

// SetInject installs fn, called before every write, sync, directory sync,
// create and rename; a non-nil result fails the operation without effect.
// fn runs with the filesystem's lock held (so blocking in it stalls every
// file operation) and must not call back into the filesystem.
func (c *CrashFS) SetInject(fn func(op Op, name string) error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.inject = fn
}

// HoldSyncs makes every file Sync wait, without the filesystem's lock,
// until release is called: what a held Sync would make durable stays
// undurable while other operations, and Crash, go on. A Sync released
// after a Crash fails like any call on a handle from before it.
func (c *CrashFS) HoldSyncs() (release func()) {
	gate := make(chan struct{})
	c.mu.Lock()
	c.syncGate = gate
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		if c.syncGate == gate {
			c.syncGate = nil
		}
		c.mu.Unlock()
		close(gate)
	}
}

// SetTorn makes Crash keep a random prefix of each file's unsynced bytes,
// with a random stretch of it zeroed, as a real disk may after power loss.
func (c *CrashFS) SetTorn(torn bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.torn = torn
}

// Crash simulates power loss: unsynced data and unsynced directory changes
// are dropped and every open handle becomes unusable.
func (c *CrashFS) Crash() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	files := map[string]*memNode{}
	for name, n := range c.durable {
		data := append([]byte(nil), n.synced...)
		if c.torn && len(n.data) > len(data) && n.dirtyFrom >= len(n.synced) {
			extra := n.data[len(data):]
			keep := c.rng.Intn(len(extra) + 1)
			tail := append([]byte(nil), extra[:keep]...)
			if keep > 0 && c.rng.Intn(2) == 0 {
				from := c.rng.Intn(keep)
				to := from + c.rng.Intn(keep-from+1)
				clear(tail[from:to])
			}
			data = append(data, tail...)
		}
		files[name] = &memNode{data: data, synced: append([]byte(nil), data...), dirtyFrom: len(data), reserved: n.reserved}
	}
	c.files = files
	c.durable = map[string]*memNode{}
	for name, n := range files {
		c.durable[name] = n
	}
}

// ReservedBeyondEnd reports how many bytes name has reserved (Preallocate)
// beyond its length.
func (c *CrashFS) ReservedBeyondEnd(name string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.files[name]
	if !ok {
		return 0
	}
	return max(0, n.reserved-int64(len(n.data)))
}

// Corrupt lets a test edit a file's bytes in place, both the visible and
// the durable copy, as a disk fault would.
func (c *CrashFS) Corrupt(name string, fn func(data []byte) []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.files[name]
	if !ok {
		return
	}
	n.data = fn(n.data)
	n.synced = append(n.synced[:0], n.data...)
	n.dirtyFrom = len(n.data)
}

func (c *CrashFS) injectLocked(op Op, name string) error {
	if c.inject == nil {
		return nil
	}
	return c.inject(op, name)
}

func (c *CrashFS) Create(name string) (File, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.dirs[filepath.Dir(name)] {
		return nil, &os.PathError{Op: "create", Path: name, Err: os.ErrNotExist}
	}
	if err := c.injectLocked(OpCreate, name); err != nil {
		return nil, err
	}
	n := &memNode{}
	c.files[name] = n
	return &memFile{fs: c, node: n, gen: c.gen, name: name}, nil
}

func (c *CrashFS) OpenAppend(name string) (File, error) { return c.open(name, false) }
func (c *CrashFS) Open(name string) (File, error)       { return c.open(name, true) }

func (c *CrashFS) open(name string, readOnly bool) (File, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.files[name]
	if !ok {
		return nil, &os.PathError{Op: "open", Path: name, Err: os.ErrNotExist}
	}
	return &memFile{fs: c, node: n, gen: c.gen, name: name, readOnly: readOnly}, nil
}

func (c *CrashFS) Remove(name string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.files[name]; !ok {
		return &os.PathError{Op: "remove", Path: name, Err: os.ErrNotExist}
	}
	delete(c.files, name)
	return nil
}

func (c *CrashFS) Rename(oldName, newName string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.files[oldName]
	if !ok {
		return &os.PathError{Op: "rename", Path: oldName, Err: os.ErrNotExist}
	}
	if err := c.injectLocked(OpRename, newName); err != nil {
		return err
	}
	delete(c.files, oldName)
	c.files[newName] = n
	return nil
}

func (c *CrashFS) List(dir string) ([]string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.dirs[dir] {
		return nil, &os.PathError{Op: "list", Path: dir, Err: os.ErrNotExist}
	}
	var names []string
	for name := range c.files {
		if filepath.Dir(name) == dir {
			names = append(names, filepath.Base(name))
		}
	}
	sort.Strings(names)
	return names, nil
}

// MkdirAll creates dir; directories themselves are treated as durable.
func (c *CrashFS) MkdirAll(dir string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for d := dir; ; d = filepath.Dir(d) {
		c.dirs[d] = true
		if d == filepath.Dir(d) {
			break
		}
	}
	return nil
}

func (c *CrashFS) SyncDir(dir string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.injectLocked(OpSyncDir, dir); err != nil {
		return err
	}
	prefix := dir + string(filepath.Separator)
	for name := range c.durable {
		if strings.HasPrefix(name, prefix) && filepath.Dir(name) == dir {
			delete(c.durable, name)
		}
	}
	for name, n := range c.files {
		if filepath.Dir(name) == dir {
			c.durable[name] = n
		}
	}
	return nil
}

type memFile struct {
	fs       *CrashFS
	node     *memNode
	gen      int
	name     string
	readOnly bool
	closed   bool
}

func (f *memFile) checkLocked() error {
	if f.closed {
		return os.ErrClosed
	}
	if f.gen != f.fs.gen {
		return ErrCrashed
	}
	return nil
}

// startLocked checks the handle is usable, then asks the injection hook
// whether op may go ahead.
func (f *memFile) startLocked(op Op) error {
	if err := f.checkLocked(); err != nil {
		return err
	}
	return f.fs.injectLocked(op, f.name)
}

// checkWritableLocked is checkLocked for calls that change the file: like
// the operating system's, they fail on a handle opened read-only.
func (f *memFile) checkWritableLocked() error {
	if err := f.checkLocked(); err != nil {
		return err
	}
	if f.readOnly {
		return os.ErrPermission
	}
	return nil
}

func (f *memFile) ReadAt(p []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.checkLocked(); err != nil {
		return 0, err
	}
	if off >= int64(len(f.node.data)) {
		return 0, io.EOF
	}
	n := copy(p, f.node.data[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (f *memFile) Write(p []byte) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.checkWritableLocked(); err != nil {
		return 0, err
	}
	if err := f.fs.injectLocked(OpWrite, f.name); err != nil {
		return 0, err
	}
	n := f.node
	n.dirtyFrom = min(n.dirtyFrom, len(n.data))
	n.data = append(n.data, p...)
	return len(p), nil
}

func (f *memFile) Sync() error {
	f.fs.mu.Lock()
	gate := f.fs.syncGate
	f.fs.mu.Unlock()
	if gate != nil {
		<-gate
	}
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.startLocked(OpSync); err != nil {
		return err
	}
	n := f.node
	from := min(n.dirtyFrom, len(n.synced), len(n.data))
	n.synced = append(n.synced[:from], n.data[from:]...)
	n.dirtyFrom = len(n.data)
	return nil
}

func (f *memFile) Truncate(size int64) error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.checkWritableLocked(); err != nil {
		return err
	}
	n := f.node
	if int(size) < len(n.data) {
		n.data = n.data[:size:size]
	} else {
		n.data = append(n.data, make([]byte, int(size)-len(n.data))...) // a longer file reads zeros
	}
	n.dirtyFrom = min(n.dirtyFrom, int(size))
	n.reserved = min(n.reserved, size) // blocks beyond the new length are freed
	return nil
}

// DropCache has no cache to drop; it reports the call to the injection
// hook, so tests can see it and make it fail.
func (f *memFile) DropCache() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	return f.startLocked(OpDropCache)
}

// Preallocate records the reservation (see ReservedBeyondEnd); like
// DropCache it reports the call to the injection hook first.
func (f *memFile) Preallocate(size int64) error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.checkWritableLocked(); err != nil {
		return err
	}
	if err := f.fs.injectLocked(OpPreallocate, f.name); err != nil {
		return err
	}
	f.node.reserved = max(f.node.reserved, size)
	return nil
}

func (f *memFile) Size() (int64, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.checkLocked(); err != nil {
		return 0, err
	}
	return int64(len(f.node.data)), nil
}

func (f *memFile) Close() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	f.closed = true
	return nil
}
