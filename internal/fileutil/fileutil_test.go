package fileutil

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

func createWith(t *testing.T, data string) *os.File {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(t.TempDir(), "file"), os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if _, err := f.WriteString(data); err != nil {
		t.Fatal(err)
	}
	return f
}

func readBack(t *testing.T, f *os.File, want string) {
	t.Helper()
	got := make([]byte, len(want)+1)
	n, _ := f.ReadAt(got, 0)
	if string(got[:n]) != want {
		t.Fatalf("file holds %q, want %q", got[:n], want)
	}
}

func TestFdatasyncKeepsTheData(t *testing.T) {
	f := createWith(t, "durable")
	if err := Fdatasync(f); err != nil {
		t.Fatalf("Fdatasync: %v", err)
	}
	readBack(t, f, "durable")
}

func TestFdatasyncOfAClosedFileFails(t *testing.T) {
	f := createWith(t, "x")
	f.Close()
	if err := Fdatasync(f); err == nil {
		t.Fatal("Fdatasync of a closed file succeeded")
	}
}

// DropCache is accepted on a synced file, and the data stays readable.
func TestDropCacheKeepsTheData(t *testing.T) {
	f := createWith(t, "cached")
	if err := Fdatasync(f); err != nil {
		t.Fatal(err)
	}
	if err := DropCache(f); err != nil {
		t.Fatalf("DropCache: %v", err)
	}
	readBack(t, f, "cached")
}

// Preallocate never changes the length: the WAL reads a segment's length as
// the end of its data, and appends land right after what was written.
func TestPreallocateKeepsTheLength(t *testing.T) {
	f := createWith(t, "header")
	if err := Preallocate(f, 1<<20); err != nil {
		if runtime.GOOS == "linux" && errors.Is(err, errNotSupported) {
			t.Skipf("this file system cannot preallocate: %v", err)
		}
		t.Fatalf("Preallocate: %v", err)
	}
	if _, err := f.WriteString("+record"); err != nil {
		t.Fatal(err)
	}
	if st, err := f.Stat(); err != nil || st.Size() != 13 {
		t.Fatalf("stat %v, %v after Preallocate and an append; want size 13", st, err)
	}
	readBack(t, f, "header+record")
	if reserved, ok := allocatedBytes(t, f); ok && reserved < 1<<20 {
		t.Fatalf("%d bytes allocated after Preallocate(1 MiB)", reserved)
	}
}

// A second lock on the same file fails with ErrLocked until the first
// holder closes its file; then it succeeds.
func TestLockFileExcludesASecondHolder(t *testing.T) {
	name := filepath.Join(t.TempDir(), "LOCK")
	open := func() *os.File {
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	first, second := open(), open()
	defer second.Close()
	if err := LockFile(first); err != nil {
		t.Fatalf("first LockFile: %v", err)
	}
	if err := LockFile(second); !errors.Is(err, ErrLocked) {
		t.Fatalf("second LockFile while the first holds it: %v, want ErrLocked", err)
	}
	first.Close()
	if err := LockFile(second); err != nil {
		t.Fatalf("LockFile after the holder closed: %v", err)
	}
}

// SleepPrecisely sleeps at least d, and not wildly more.
func TestSleepPreciselySleepsAtLeastD(t *testing.T) {
	const d = 2 * time.Millisecond
	start := time.Now()
	SleepPrecisely(d)
	if took := time.Since(start); took < d || took > d+time.Second {
		t.Fatalf("SleepPrecisely(%s) took %s", d, took)
	}
}
