package objstore

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// localFile writes data to a new file in dir and returns it open.
func localFile(t *testing.T, dir, name string, data []byte) *os.File {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// objectIs reports whether the key's object is f's file itself (linked).
func objectIs(t *testing.T, root, key string, f *os.File) bool {
	t.Helper()
	object, err := os.Lstat(filepath.Join(root, filepath.FromSlash(key)))
	if err != nil {
		t.Fatal(err)
	}
	if !object.Mode().IsRegular() {
		t.Fatalf("%s is %v, not a regular file", key, object.Mode())
	}
	info, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	return os.SameFile(object, info)
}

// TestFilePutLinksLocalFiles: a whole local file on the store's filesystem
// becomes the object by a link, not a copy; whatever cannot be linked is
// copied; either way a key that exists is refused and nothing is left in
// the staging directory.
func TestFilePutLinksLocalFiles(t *testing.T) {
	ctx := context.Background()
	cases := map[string]struct {
		prepare func(t *testing.T, dir string, f *os.File) int64 // returns the size to put
		linked  bool
	}{
		"whole_file":         {func(t *testing.T, dir string, f *os.File) int64 { return 10 }, true},
		"prefix_of_the_file": {func(t *testing.T, dir string, f *os.File) int64 { return 4 }, false},
		"name_removed": {func(t *testing.T, dir string, f *os.File) int64 {
			if err := os.Remove(f.Name()); err != nil {
				t.Fatal(err)
			}
			return 10
		}, false},
		"name_given_to_another_file": {func(t *testing.T, dir string, f *os.File) int64 {
			other := filepath.Join(dir, "other")
			if err := os.WriteFile(other, []byte("OTHER-FILE"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(other, f.Name()); err != nil {
				t.Fatal(err)
			}
			return 10
		}, false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			root, dir := t.TempDir(), t.TempDir()
			store := mustOpen(t, "file://"+root, Options{})
			data := []byte("0123456789")
			f := localFile(t, dir, "building.parquet", data)
			size := tc.prepare(t, dir, f)
			if err := store.PutIfAbsent(ctx, "dt=x/a.parquet", f, size); err != nil {
				t.Fatal(err)
			}
			if got := get(t, store, "dt=x/a.parquet"); !bytes.Equal(got, data[:size]) {
				t.Errorf("object %q, want %q", got, data[:size])
			}
			if linked := objectIs(t, root, "dt=x/a.parquet", f); linked != tc.linked {
				t.Errorf("object linked to the local file: %v, want %v", linked, tc.linked)
			}
			again := localFile(t, dir, "again.parquet", []byte("abcdefghij"))
			if err := store.PutIfAbsent(ctx, "dt=x/a.parquet", again, 10); !errors.Is(err, ErrExists) {
				t.Errorf("put of another file under the key: %v, want ErrExists", err)
			}
			if got := get(t, store, "dt=x/a.parquet"); !bytes.Equal(got, data[:size]) {
				t.Errorf("after a refused put the object is %q, want %q", got, data[:size])
			}
			checkStagingEmpty(t, root)
		})
	}
}

// TestFilePutLinkedRace: of several puts of local files under one key at
// once, exactly one wins, and the object is its file.
func TestFilePutLinkedRace(t *testing.T) {
	root, dir := t.TempDir(), t.TempDir()
	store := mustOpen(t, "file://"+root, Options{})
	files := make([]*os.File, 8)
	for i := range files {
		files[i] = localFile(t, dir, string(rune('a'+i)), bytes.Repeat([]byte{byte('a' + i)}, 1000))
	}
	errs := make([]error, len(files))
	var wg sync.WaitGroup
	for i, f := range files {
		wg.Go(func() { errs[i] = store.PutIfAbsent(context.Background(), "k", f, 1000) })
	}
	wg.Wait()
	winners := 0
	for i, err := range errs {
		switch {
		case err == nil:
			winners++
			if !objectIs(t, root, "k", files[i]) {
				t.Errorf("put %d won, but the object is not its file", i)
			}
		case !errors.Is(err, ErrExists):
			t.Errorf("put %d: %v", i, err)
		}
	}
	if winners != 1 {
		t.Errorf("%d puts won, want 1", winners)
	}
	checkStagingEmpty(t, root)
}

// TestFilePutSymlinkedFile: a file opened through a symbolic link is
// copied, never stored as the link.
func TestFilePutSymlinkedFile(t *testing.T) {
	root, dir := t.TempDir(), t.TempDir()
	store := mustOpen(t, "file://"+root, Options{})
	localFile(t, dir, "target", []byte("0123456789"))
	if err := os.Symlink("target", filepath.Join(dir, "link")); err != nil {
		t.Skip("no symbolic links:", err)
	}
	f, err := os.Open(filepath.Join(dir, "link"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := store.PutIfAbsent(context.Background(), "k", f, 10); err != nil {
		t.Fatal(err)
	}
	if objectIs(t, root, "k", f) {
		t.Error("the object is the target file itself, want a copy")
	}
	if got := get(t, store, "k"); string(got) != "0123456789" {
		t.Errorf("object %q", got)
	}
	checkStagingEmpty(t, root)
}

func checkStagingEmpty(t *testing.T, root string) {
	t.Helper()
	staged, err := os.ReadDir(filepath.Join(root, stagingDir))
	if err != nil || len(staged) != 0 {
		t.Errorf("staging directory: %v, %v; want empty", staged, err)
	}
}
