package walfs

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Operations ErrorFS can match besides those of CrashFS's injection hook.
const (
	OpOpen       Op = iota + OpPreallocate + 1 // FS.Open (read-only)
	OpOpenAppend                               // FS.OpenAppend
	OpRead                                     // File.ReadAt
	OpRemove                                   // FS.Remove
	OpList                                     // FS.List
	OpMkdirAll                                 // FS.MkdirAll
	OpTruncate                                 // File.Truncate
	OpSize                                     // File.Size
	OpClose                                    // File.Close
)

var opNames = map[Op]string{
	OpWrite: "write", OpSync: "sync", OpSyncDir: "syncdir", OpCreate: "create", OpRename: "rename",
	OpDropCache: "dropcache", OpPreallocate: "preallocate", OpOpen: "open", OpOpenAppend: "openappend",
	OpRead: "read", OpRemove: "remove", OpList: "list", OpMkdirAll: "mkdirall", OpTruncate: "truncate",
	OpSize: "size", OpClose: "close",
}

func (op Op) String() string {
	if s, ok := opNames[op]; ok {
		return s
	}
	return fmt.Sprintf("op(%d)", int(op))
}

// InjectedError is the cause of every error ErrorFS injects. It is wrapped
// in an *os.PathError naming the operation and path, as a real failure is,
// and errors.Is(err, ErrInjected) recognises it; Err (say syscall.EIO or
// syscall.ENOSPC) is what the caller would have seen from the OS.
type InjectedError struct {
	Err error
}

func (e *InjectedError) Error() string { return "injected: " + e.Err.Error() }

// Unwrap returns the imitated error.
func (e *InjectedError) Unwrap() error { return e.Err }

// Is reports whether target is ErrInjected.
func (e *InjectedError) Is(target error) bool { return target == ErrInjected }

// Rule says which operations ErrorFS disturbs and how. An operation is
// disturbed when its kind is in Ops, its path passes Path and Trigger fires.
type Rule struct {
	// Ops are the operation kinds the rule applies to; empty means all.
	Ops []Op
	// Path selects paths (see Glob); nil means every path. For File calls
	// the path is the name the file was opened with; for Rename, the new
	// name; for List, MkdirAll and SyncDir, the directory.
	Path func(path string) bool
	// Trigger decides, for each matching operation, whether the action
	// happens; nil means always.
	Trigger Trigger
	// Action is what happens.
	Action Action
}

// Glob matches a path against pattern (filepath.Match syntax): the whole
// path if pattern holds a separator, otherwise the path's base name.
func Glob(pattern string) func(string) bool {
	if _, err := filepath.Match(pattern, ""); err != nil {
		panic(fmt.Sprintf("walfs: bad glob %q: %v", pattern, err))
	}
	whole := strings.ContainsRune(pattern, filepath.Separator)
	return func(path string) bool {
		if !whole {
			path = filepath.Base(path)
		}
		ok, _ := filepath.Match(pattern, path)
		return ok
	}
}

// Trigger decides whether a rule fires for one matching operation. ErrorFS
// consults a rule's trigger once per matching operation, in the order the
// operations reach it, with its lock held: triggers keep state without
// locks of their own.
type Trigger interface {
	fire() bool
}

type triggerFunc func() bool

func (f triggerFunc) fire() bool { return f() }

// Always fires for every matching operation.
func Always() Trigger { return triggerFunc(func() bool { return true }) }

// Nth fires for the nth matching operation only (n ≥ 1).
func Nth(n int) Trigger {
	seen := 0
	return triggerFunc(func() bool { seen++; return seen == n })
}

// Once fires for the first matching operation only.
func Once() Trigger { return Nth(1) }

// FromNth fires for the nth matching operation and every one after it.
func FromNth(n int) Trigger {
	seen := 0
	return triggerFunc(func() bool { seen++; return seen >= n })
}

// Probability fires with probability p, drawn from a generator seeded with
// seed: the same sequence of matching operations gets the same decisions.
func Probability(p float64, seed uint64) Trigger {
	rng := rand.New(rand.NewPCG(seed, 0xe7f5))
	return triggerFunc(func() bool { return rng.Float64() < p })
}

// Action is what a fired rule does to the operation.
type Action interface {
	// before runs before the operation and returns what it must fail
	// with (nil: go ahead) and how long it must wait first.
	before() (error, time.Duration)
	// corrupt may alter the bytes a successful read returned.
	corrupt(p []byte, off int64)
}

type failAction struct{ err error }

func (a failAction) before() (error, time.Duration) { return a.err, 0 }
func (failAction) corrupt([]byte, int64)            {}

// Fail makes the operation return err (syscall.EIO, syscall.ENOSPC, …) in
// an *os.PathError with an *InjectedError between them, without touching
// the underlying filesystem. A nil err means ErrInjected itself.
func Fail(err error) Action {
	if err == nil {
		err = ErrInjected
	}
	return failAction{err}
}

type delayAction struct{ d time.Duration }

func (a delayAction) before() (error, time.Duration) { return nil, a.d }
func (delayAction) corrupt([]byte, int64)            {}

// Delay makes the operation wait d (through the ErrorFS's sleep function,
// see SetSleep) and then go ahead.
func Delay(d time.Duration) Action { return delayAction{d} }

type corruptAction struct{ fn func(p []byte, off int64) }

func (corruptAction) before() (error, time.Duration) { return nil, 0 }
func (a corruptAction) corrupt(p []byte, off int64)  { a.fn(p, off) }

// CorruptRead lets fn alter the bytes a read returned; off is the file
// offset of p[0]. Only reads (OpRead) are affected: the file's own bytes
// stay as they are.
func CorruptRead(fn func(p []byte, off int64)) Action { return corruptAction{fn} }

// FlipBit is a CorruptRead that inverts the lowest bit of the first byte
// returned.
func FlipBit() Action {
	return CorruptRead(func(p []byte, _ int64) {
		if len(p) > 0 {
			p[0] ^= 1
		}
	})
}

// RuleID names an added rule.
type RuleID int

// ErrorFS wraps an FS and disturbs the operations its rules match: it
// fails them, delays them or corrupts what they read. Rules can be added
// and removed while the filesystem is in use; it is safe for concurrent
// use. It composes with CrashFS: NewErrorFS(NewCrashFS(seed)).
type ErrorFS struct {
	inner FS
	mu    struct {
		sync.Mutex
		next  RuleID
		rules []activeRule
		sleep func(time.Duration)
		// hits counts fired rules, also after their removal.
		hits map[RuleID]int
	}
}

type activeRule struct {
	id   RuleID
	rule Rule
}

// NewErrorFS wraps inner with no rules: every call passes through.
func NewErrorFS(inner FS) *ErrorFS {
	e := &ErrorFS{inner: inner}
	e.mu.sleep = time.Sleep
	e.mu.hits = make(map[RuleID]int)
	return e
}

// SetSleep replaces the function Delay actions wait with (time.Sleep by
// default), so that a test can count or skip the waits instead of taking
// them. fn is called without ErrorFS's lock.
func (e *ErrorFS) SetSleep(fn func(time.Duration)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.mu.sleep = fn
}

// AddRule installs r after the rules already there and returns its id.
func (e *ErrorFS) AddRule(r Rule) RuleID {
	if r.Action == nil {
		panic("walfs: rule without an action")
	}
	if r.Trigger == nil {
		r.Trigger = Always()
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.mu.next++
	e.mu.rules = append(e.mu.rules, activeRule{e.mu.next, r})
	return e.mu.next
}

// RemoveRule uninstalls a rule; operations already past it are unaffected.
func (e *ErrorFS) RemoveRule(id RuleID) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for i, r := range e.mu.rules {
		if r.id == id {
			e.mu.rules = append(e.mu.rules[:i:i], e.mu.rules[i+1:]...)
			return
		}
	}
}

// Clear removes every rule.
func (e *ErrorFS) Clear() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.mu.rules = nil
}

// Hits is how many operations the rule has disturbed.
func (e *ErrorFS) Hits(id RuleID) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.mu.hits[id]
}

// verdict is what the rules decided for one operation.
type verdict struct {
	err      error
	corrupts []Action
}

// check runs the rules for one operation: it waits for every fired delay,
// and returns the first fired failure and the corruptions to apply.
func (e *ErrorFS) check(op Op, path string) verdict {
	e.mu.Lock()
	var v verdict
	var wait time.Duration
	for _, r := range e.mu.rules {
		if !r.matches(op, path) || !r.rule.Trigger.fire() {
			continue
		}
		e.mu.hits[r.id]++
		err, d := r.rule.Action.before()
		wait += d
		if err != nil && v.err == nil {
			v.err = &os.PathError{Op: op.String(), Path: path, Err: &InjectedError{Err: err}}
		}
		if _, ok := r.rule.Action.(corruptAction); ok {
			v.corrupts = append(v.corrupts, r.rule.Action)
		}
	}
	sleep := e.mu.sleep
	e.mu.Unlock()
	if wait > 0 {
		sleep(wait)
	}
	return v
}

func (r activeRule) matches(op Op, path string) bool {
	if len(r.rule.Ops) > 0 && !containsOp(r.rule.Ops, op) {
		return false
	}
	return r.rule.Path == nil || r.rule.Path(path)
}

func containsOp(ops []Op, op Op) bool {
	for _, o := range ops {
		if o == op {
			return true
		}
	}
	return false
}

// fail runs the rules for an operation that reads nothing.
func (e *ErrorFS) fail(op Op, path string) error { return e.check(op, path).err }

func (e *ErrorFS) Create(name string) (File, error) {
	return e.openWith(OpCreate, name, e.inner.Create)
}

func (e *ErrorFS) OpenAppend(name string) (File, error) {
	return e.openWith(OpOpenAppend, name, e.inner.OpenAppend)
}

func (e *ErrorFS) Open(name string) (File, error) {
	return e.openWith(OpOpen, name, e.inner.Open)
}

func (e *ErrorFS) openWith(op Op, name string, open func(string) (File, error)) (File, error) {
	if err := e.fail(op, name); err != nil {
		return nil, err
	}
	f, err := open(name)
	if err != nil {
		return nil, err
	}
	return &errorFile{fs: e, inner: f, name: name}, nil
}

func (e *ErrorFS) Remove(name string) error {
	if err := e.fail(OpRemove, name); err != nil {
		return err
	}
	return e.inner.Remove(name)
}

func (e *ErrorFS) Rename(oldName, newName string) error {
	if err := e.fail(OpRename, newName); err != nil {
		return err
	}
	return e.inner.Rename(oldName, newName)
}

func (e *ErrorFS) List(dir string) ([]string, error) {
	if err := e.fail(OpList, dir); err != nil {
		return nil, err
	}
	return e.inner.List(dir)
}

func (e *ErrorFS) MkdirAll(dir string) error {
	if err := e.fail(OpMkdirAll, dir); err != nil {
		return err
	}
	return e.inner.MkdirAll(dir)
}

func (e *ErrorFS) SyncDir(dir string) error {
	if err := e.fail(OpSyncDir, dir); err != nil {
		return err
	}
	return e.inner.SyncDir(dir)
}

// errorFile is a File opened through an ErrorFS.
type errorFile struct {
	fs    *ErrorFS
	inner File
	name  string
}

func (f *errorFile) ReadAt(p []byte, off int64) (int, error) {
	v := f.fs.check(OpRead, f.name)
	if v.err != nil {
		return 0, v.err
	}
	n, err := f.inner.ReadAt(p, off)
	for _, a := range v.corrupts {
		a.corrupt(p[:n], off)
	}
	return n, err
}

func (f *errorFile) Write(p []byte) (int, error) {
	if err := f.fs.fail(OpWrite, f.name); err != nil {
		return 0, err
	}
	return f.inner.Write(p)
}

// Close closes the underlying file even when a rule fails the call, as
// the operating system releases a descriptor whose close reports an error.
func (f *errorFile) Close() error {
	err := f.fs.fail(OpClose, f.name)
	if cerr := f.inner.Close(); err == nil {
		err = cerr
	}
	return err
}

func (f *errorFile) Sync() error {
	if err := f.fs.fail(OpSync, f.name); err != nil {
		return err
	}
	return f.inner.Sync()
}

func (f *errorFile) Truncate(size int64) error {
	if err := f.fs.fail(OpTruncate, f.name); err != nil {
		return err
	}
	return f.inner.Truncate(size)
}

func (f *errorFile) Size() (int64, error) {
	if err := f.fs.fail(OpSize, f.name); err != nil {
		return 0, err
	}
	return f.inner.Size()
}

func (f *errorFile) DropCache() error {
	if err := f.fs.fail(OpDropCache, f.name); err != nil {
		return err
	}
	return f.inner.DropCache()
}

func (f *errorFile) Preallocate(size int64) error {
	if err := f.fs.fail(OpPreallocate, f.name); err != nil {
		return err
	}
	return f.inner.Preallocate(size)
}
