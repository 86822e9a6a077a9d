package walfs

import (
	"path/filepath"
	"testing"
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
