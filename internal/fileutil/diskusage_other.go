//go:build !(linux || darwin || freebsd)

package fileutil

import (
	"errors"
	"fmt"
)

func statDisk(string) (DiskUsage, error) {
	return DiskUsage{}, fmt.Errorf("fileutil: disk usage: %w", errors.ErrUnsupported)
}
