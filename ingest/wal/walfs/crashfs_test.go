package walfs

import (
	"bytes"
	"errors"
	"testing"
)

func readAll(t *testing.T, fs *CrashFS, name string) []byte {
	t.Helper()
	f, err := fs.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	size, _ := f.Size()
	b := make([]byte, size)
	f.ReadAt(b, 0)
	return b
}

func TestCrashDropsUnsyncedData(t *testing.T) {
	fs := NewCrashFS(1)
	fs.MkdirAll("/d")
	f, _ := fs.Create("/d/a")
	f.Write([]byte("synced"))
	f.Sync()
	fs.SyncDir("/d")
	f.Write([]byte("-lost"))
	g, _ := fs.Create("/d/b") // never dir-synced
	g.Write([]byte("x"))
	g.Sync()
	fs.Crash()
	if got := readAll(t, fs, "/d/a"); !bytes.Equal(got, []byte("synced")) {
		t.Fatalf("after crash a = %q", got)
	}
	if _, err := fs.Open("/d/b"); err == nil {
		t.Fatalf("file created without a directory sync survived the crash")
	}
	if _, err := f.Write([]byte("z")); !errors.Is(err, ErrCrashed) {
		t.Fatalf("old handle after crash: %v", err)
	}
}

// unsyncedFile is /d/a, whose creation is durable and whose data is not.
func unsyncedFile() (*CrashFS, File) {
	fs := NewCrashFS(1)
	fs.MkdirAll("/d")
	f, _ := fs.Create("/d/a")
	fs.SyncDir("/d")
	f.Write([]byte("data"))
	return fs, f
}

func TestFailedSyncIsNotDurable(t *testing.T) {
	fs, f := unsyncedFile()
	fs.SetInject(func(op Op, name string) error {
		if op == OpSync {
			return ErrInjected
		}
		return nil
	})
	if err := f.Sync(); !errors.Is(err, ErrInjected) {
		t.Fatalf("sync: %v", err)
	}
	fs.SetInject(nil)
	fs.Crash()
	if got := readAll(t, fs, "/d/a"); len(got) != 0 {
		t.Fatalf("data of a failed sync survived: %q", got)
	}
}

// TestHeldSyncIsNotDurable: a Sync held until after a crash makes nothing
// durable and fails, while other operations went on meanwhile.
func TestHeldSyncIsNotDurable(t *testing.T) {
	fs, f := unsyncedFile()
	release := fs.HoldSyncs()
	synced := make(chan error, 1)
	go func() { synced <- f.Sync() }()
	if _, err := f.Write([]byte("-more")); err != nil { // not stalled by the held Sync
		t.Fatal(err)
	}
	fs.Crash()
	release()
	if err := <-synced; !errors.Is(err, ErrCrashed) {
		t.Fatalf("held sync released after the crash: %v, want ErrCrashed", err)
	}
	if got := readAll(t, fs, "/d/a"); len(got) != 0 {
		t.Fatalf("data of a held sync survived the crash: %q", got)
	}
}

func TestTornCrashKeepsAPrefix(t *testing.T) {
	fs := NewCrashFS(3)
	fs.SetTorn(true)
	fs.MkdirAll("/d")
	f, _ := fs.Create("/d/a")
	f.Write([]byte("head"))
	f.Sync()
	fs.SyncDir("/d")
	f.Write(bytes.Repeat([]byte{7}, 1000))
	fs.Crash()
	got := readAll(t, fs, "/d/a")
	if len(got) < 4 || !bytes.Equal(got[:4], []byte("head")) || len(got) > 1004 {
		t.Fatalf("torn crash left %d bytes starting %q", len(got), got[:min(len(got), 4)])
	}
}

// TestReadOnlyHandlesChangeNothing: like the operating system's, a handle
// from Open can neither write, truncate nor reserve.
func TestReadOnlyHandlesChangeNothing(t *testing.T) {
	fs := NewCrashFS(1)
	fs.MkdirAll("/d")
	f, _ := fs.Create("/d/a")
	f.Write([]byte("data"))
	r, err := fs.Open("/d/a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Write([]byte("x")); err == nil {
		t.Fatal("write through a read-only handle accepted")
	}
	if err := r.Truncate(1); err == nil {
		t.Fatal("truncate through a read-only handle accepted")
	}
	if err := r.Preallocate(1 << 20); err == nil {
		t.Fatal("preallocate through a read-only handle accepted")
	}
	if got := readAll(t, fs, "/d/a"); !bytes.Equal(got, []byte("data")) || fs.ReservedBeyondEnd("/d/a") != 0 {
		t.Fatalf("after refused calls: %q, %d reserved", got, fs.ReservedBeyondEnd("/d/a"))
	}
}

// TestTruncateExtendsWithZeros: a longer length reads as zeros, as ftruncate's does.
func TestTruncateExtendsWithZeros(t *testing.T) {
	fs := NewCrashFS(1)
	fs.MkdirAll("/d")
	f, _ := fs.Create("/d/a")
	f.Write([]byte("ab"))
	if err := f.Truncate(5); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, fs, "/d/a"); !bytes.Equal(got, []byte("ab\x00\x00\x00")) {
		t.Fatalf("extended file reads %q", got)
	}
}
