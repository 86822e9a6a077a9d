package fileutil

import (
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

func fdatasync(f *os.File) error {
	return control(f, func(fd uintptr) error { return syscall.Fdatasync(int(fd)) })
}

func dropCache(f *os.File) error {
	return control(f, func(fd uintptr) error { return unix.Fadvise(int(fd), 0, 0, unix.FADV_DONTNEED) })
}

func preallocate(f *os.File, size int64) error {
	return control(f, func(fd uintptr) error { return unix.Fallocate(int(fd), unix.FALLOC_FL_KEEP_SIZE, 0, size) })
}

func sleepPrecisely(d time.Duration) {
	ts := unix.NsecToTimespec(d.Nanoseconds())
	for unix.Nanosleep(&ts, &ts) == unix.EINTR { // ts holds what is left
	}
}
