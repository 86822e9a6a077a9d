//go:build !(darwin || dragonfly || freebsd || linux || netbsd || openbsd || windows)

package fileutil

import (
	"errors"
	"fmt"
	"os"
	"runtime"
)

// lockFile cannot lock here: a data directory would go unprotected, so the
// caller is told rather than given a lock that excludes nobody.
func lockFile(*os.File) error {
	return fmt.Errorf("fileutil: no file lock on %s: %w", runtime.GOOS, errors.ErrUnsupported)
}
