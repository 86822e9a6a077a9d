package wal

import (
	"errors"
	"os"
	"path/filepath"

	"orderlog/ingest/wal/walfs"
	"orderlog/internal/fileutil"
)

const lockName = "LOCK"

// dirLock is an exclusive lock (flock on Linux) on <dir>/LOCK, held while a
// Store is open on the real filesystem. The kernel drops it when the process
// dies, so a crashed store never blocks its successor.
type dirLock struct{ f *os.File }

// lockDir takes the lock, or fails with ErrLocked. Other filesystems (the
// test CrashFS) are not locked.
func lockDir(fsys walfs.FS, dir string) (*dirLock, error) {
	if _, ok := fsys.(walfs.OS); !ok {
		return &dirLock{}, nil
	}
	f, err := LockDirectory(dir)
	if err != nil {
		return nil, err
	}
	return &dirLock{f: f}, nil
}

// LockDirectory takes an exclusive lock (fileutil.LockFile) on <dir>/LOCK
// and returns its file (closing it releases the lock), or fails with
// ErrLocked while another holder has it.
func LockDirectory(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, lockName), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := fileutil.LockFile(f); err != nil {
		f.Close()
		if errors.Is(err, fileutil.ErrLocked) {
			return nil, ErrLocked
		}
		return nil, err
	}
	return f, nil
}

func (l *dirLock) release() {
	if l.f != nil {
		l.f.Close()
	}
}
