package walfs

import (
	"errors"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// The real file system's DropCache is accepted by the kernel on a synced
// file, and the data stays readable.
func TestOSDropCacheKeepsTheData(t *testing.T) {
	f, err := OS{}.Create(filepath.Join(t.TempDir(), "segment"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write([]byte("durable")); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.DropCache(); err != nil {
		t.Fatalf("DropCache: %v", err)
	}
	got := make([]byte, 7)
	if _, err := f.ReadAt(got, 0); err != nil || string(got) != "durable" {
		t.Fatalf("read %q, %v after DropCache", got, err)
	}
}

// The real file system's Preallocate reserves the blocks without changing
// the length: the store reads a segment's length as the end of its data,
// and appends still land right after what was written.
func TestOSPreallocateKeepsTheLength(t *testing.T) {
	name := filepath.Join(t.TempDir(), "segment")
	f, err := OS{}.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write([]byte("header")); err != nil {
		t.Fatal(err)
	}
	const reserved = 1 << 20
	if err := f.Preallocate(reserved); errors.Is(err, unix.EOPNOTSUPP) {
		t.Skipf("this file system cannot preallocate: %v", err)
	} else if err != nil {
		t.Fatalf("Preallocate: %v", err)
	}
	if _, err := f.Write([]byte("+record")); err != nil {
		t.Fatal(err)
	}
	if size, err := f.Size(); err != nil || size != 13 {
		t.Fatalf("size %d, %v after Preallocate and an append; want 13", size, err)
	}
	got := make([]byte, 13)
	if _, err := f.ReadAt(got, 0); err != nil || string(got) != "header+record" {
		t.Fatalf("read %q, %v", got, err)
	}
	var st unix.Stat_t
	if err := unix.Stat(name, &st); err != nil {
		t.Fatal(err)
	}
	if st.Blocks*512 < reserved {
		t.Fatalf("%d bytes of blocks after Preallocate(%d)", st.Blocks*512, reserved)
	}
}
