package tiering

import (
	"reflect"
	"testing"
)

// TestListingPagesTheLoadedFilesNewestFirst: pages of the loaded files,
// newest first, each ending where the previous one began, the last with
// no cursor.
func TestListingPagesTheLoadedFilesNewestFirst(t *testing.T) {
	a := &ArchiveReader{}
	if l := a.Listing(0, 10); l.Known || len(l.Files) != 0 || l.Before != 0 {
		t.Fatalf("no head yet: %+v", l)
	}
	a.mu.known, a.mu.head = true, Head{First: 0, T: 50, Files: 4}
	a.mu.entries = []ManifestEntry{{First: 0, End: 10}, {First: 10, End: 25}, {First: 25, End: 40}, {First: 40, End: 45}}
	firsts := func(l ArchiveListing) []uint64 {
		var out []uint64
		for _, f := range l.Files {
			out = append(out, f.First)
		}
		return out
	}
	for _, c := range []struct {
		before     uint64
		limit      int
		want       []uint64
		wantBefore uint64
	}{
		{0, 2, []uint64{40, 25}, 25},
		{25, 2, []uint64{10, 0}, 0},
		{0, 10, []uint64{40, 25, 10, 0}, 0},
		{10, 0, []uint64{0}, 0}, // a limit below 1 is 1
		{40, 1, []uint64{25}, 25},
	} {
		l := a.Listing(c.before, c.limit)
		if got := firsts(l); !reflect.DeepEqual(got, c.want) || l.Before != c.wantBefore || l.Loaded != 45 || l.Head.T != 50 {
			t.Errorf("Listing(%d, %d): files from %v, before %d, loaded %d; want %v, before %d, loaded 45",
				c.before, c.limit, got, l.Before, l.Loaded, c.want, c.wantBefore)
		}
	}
}
