package fileutil

import (
	"errors"
	"os"
	"time"
)

// ErrLocked is returned by LockFile when another open file description (in
// this process or another) holds the lock.
var ErrLocked = errors.New("fileutil: file locked by another holder")

// Fdatasync makes f's written data durable, with the metadata needed to read
// it back (its length) but not, where the platform can tell them apart,
// timestamps. Linux: fdatasync(2). Elsewhere: f.Sync (on macOS an
// F_FULLFSYNC, which also flushes the drive's write cache).
func Fdatasync(f *os.File) error { return fdatasync(f) }

// DropCache advises the operating system that f's cached pages, already
// synced, will not be read again soon. Advisory: an error, or a platform
// without the advice, changes nothing but the page cache. Linux:
// posix_fadvise(POSIX_FADV_DONTNEED) over the whole file. Elsewhere: nothing.
func DropCache(f *os.File) error { return dropCache(f) }

// Preallocate reserves disk blocks for f's first size bytes without changing
// its length, so that later appends within them allocate nothing. Advisory:
// after an error, appends allocate as they go. Linux: fallocate(2) with
// FALLOC_FL_KEEP_SIZE (EOPNOTSUPP on a file system that cannot). macOS:
// fcntl(F_PREALLOCATE) of the bytes not yet allocated, which also leaves the
// length alone; ENOTSUP is reported as success. Elsewhere: nothing.
func Preallocate(f *os.File, size int64) error { return preallocate(f, size) }

// LockFile takes an exclusive lock on f without waiting, or fails with
// ErrLocked while another holder has it. Closing f releases the lock, and
// the operating system drops it when the process dies, so a crashed holder
// never blocks its successor. Linux, macOS and the BSDs: flock(2) with
// LOCK_EX|LOCK_NB. Windows: LockFileEx, exclusive, fail immediately.
// Elsewhere: an error wrapping errors.ErrUnsupported.
func LockFile(f *os.File) error { return lockFile(f) }

// SleepPrecisely blocks the calling thread (not only the goroutine) for d.
// time.Sleep is not precise enough for delays of a few hundred µs on Linux:
// while the process is otherwise idle the runtime waits for its timers in
// epoll, whose timeout is whole milliseconds, and a 150 µs time.Sleep
// measured 1.09 ms (nanosleep: 205 µs, the kernel's 50 µs timer slack
// included). Blocking the thread costs the runtime nothing: its P is handed
// on if needed. Linux: nanosleep(2), resumed after EINTR for what is left.
// Elsewhere: time.Sleep.
func SleepPrecisely(d time.Duration) { sleepPrecisely(d) }

// control runs fn on f's descriptor, kept open for the duration of the call.
func control(f *os.File, fn func(fd uintptr) error) error {
	conn, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var fnErr error
	if err := conn.Control(func(fd uintptr) { fnErr = fn(fd) }); err != nil {
		return err
	}
	return fnErr
}
