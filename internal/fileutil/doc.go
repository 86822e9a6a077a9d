// Package fileutil owns orderlog's operating-system specific file and
// thread calls: data-only sync, page-cache advice, block preallocation, the
// exclusive lock on a data directory, a sleep precise to microseconds, and the
// disk usage of the file system holding a directory (statfs).
//
// Each exported function has one meaning on every platform; the files named
// *_linux.go, *_darwin.go, *_windows.go and *_other.go hold how each platform
// gets there, or the portable fallback where it cannot. Linux is the platform
// orderlog is tuned and measured on, and there every function is the system
// call orderlog has always made (fdatasync, posix_fadvise, fallocate, flock,
// nanosleep, statfs). Elsewhere a fallback must keep every durability and exclusion
// guarantee (Fdatasync falls back to a full sync, never to nothing) and may
// only lose speed (DropCache and, where unsupported, Preallocate do nothing).
//
// The package holds no state and starts no goroutines. It must never decide
// policy (when to sync, what to lock): its callers, the WAL store and the
// benchmarks, do.
package fileutil
