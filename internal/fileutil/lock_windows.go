package fileutil

import (
	"errors"
	"os"

	"golang.org/x/sys/windows"
)

// lockFile locks the whole file, as flock does on Unix: the range starts at
// byte 0 and is as long as any file can be.
func lockFile(f *os.File) error {
	err := control(f, func(fd uintptr) error {
		var whole windows.Overlapped
		return windows.LockFileEx(windows.Handle(fd), windows.LOCKFILE_EXCLUSIVE_LOCK|windows.LOCKFILE_FAIL_IMMEDIATELY,
			0, ^uint32(0), ^uint32(0), &whole)
	})
	if errors.Is(err, windows.ERROR_LOCK_VIOLATION) {
		return ErrLocked
	}
	return err
}
