//go:build darwin || dragonfly || freebsd || linux || netbsd || openbsd

package fileutil

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

func lockFile(f *os.File) error {
	err := control(f, func(fd uintptr) error { return unix.Flock(int(fd), unix.LOCK_EX|unix.LOCK_NB) })
	if errors.Is(err, unix.EWOULDBLOCK) {
		return ErrLocked
	}
	return err
}
