//go:build !linux

package fileutil

import (
	"errors"
	"os"
	"testing"
)

// errNotSupported never matches: off Linux, Preallocate reports no
// unsupported file system (macOS) or does nothing (elsewhere).
var errNotSupported = errors.New("never returned")

// allocatedBytes is not checked off Linux: only the length is.
func allocatedBytes(*testing.T, *os.File) (int64, bool) { return 0, false }
