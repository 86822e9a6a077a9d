package tiering

import "sort"

// ArchiveListing is a page of the archive's files as one reader has them
// loaded (the web console's Archive page): no object store I/O.
type ArchiveListing struct {
	Known bool // a head was seen
	Head  Head
	// Loaded is where the loaded manifest ends: below Head.T while
	// segments are still loading (or fail to).
	Loaded uint64
	// Files are newest first.
	Files []ManifestEntry
	// Before is where the next page ends (pass it as before), 0 when
	// these are the oldest loaded files.
	Before uint64
}

// Listing returns up to limit (at least 1) of the loaded files that end
// at or below before (0: from the newest), newest first.
func (a *ArchiveReader) Listing(before uint64, limit int) ArchiveListing {
	a.mu.Lock()
	defer a.mu.Unlock()
	l := ArchiveListing{Known: a.mu.known, Head: a.mu.head, Loaded: a.loadedLocked()}
	entries := a.mu.entries // contiguous and in offset order: a file's First is its predecessor's End
	end := len(entries)
	if before > 0 {
		end = sort.Search(len(entries), func(i int) bool { return entries[i].End > before })
	}
	start := max(0, end-max(limit, 1))
	for i := end - 1; i >= start; i-- {
		l.Files = append(l.Files, entries[i])
	}
	if start > 0 {
		l.Before = entries[start].First // above 0: entries[start-1] ends there
	}
	return l
}
