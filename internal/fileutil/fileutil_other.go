//go:build !linux

package fileutil

import (
	"os"
	"time"
)

// fdatasync falls back to a full sync: durable, if slower.
func fdatasync(f *os.File) error { return f.Sync() }

// dropCache has no portable equivalent; the advice is only lost.
func dropCache(*os.File) error { return nil }

func sleepPrecisely(d time.Duration) { time.Sleep(d) }
