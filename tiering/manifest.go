package tiering

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"strings"
)

// The manifest is one immutable segment per published file, under
// PREFIX/_manifest/ and named like the file, so that listing the directory
// gives the files in offset order; the head in etcd names the newest
// (docs/format/archive.md, "Manifest").

// ManifestDir is the manifest's directory under the archive's prefix.
const ManifestDir = "_manifest"

// Hole is an offset range [First, End) in a file's range without a
// message.
type Hole struct {
	First uint64 `json:"first"`
	End   uint64 `json:"end"`
}

// ManifestEntry describes one published file. Version 1.
type ManifestEntry struct {
	Version int    `json:"version"`
	First   uint64 `json:"first"`
	End     uint64 `json:"end"`
	Object  string `json:"object"`
	Rows    int64  `json:"rows"`
	Bytes   int64  `json:"bytes"`
	Holes   []Hole `json:"holes"`
	Digest  string `json:"digest"`
	// FirstIngestMicros and LastIngestMicros bound the rows' ingest times
	// (0 when the file has no row): time-range queries skip files by them.
	FirstIngestMicros int64 `json:"first_ingest_us"`
	LastIngestMicros  int64 `json:"last_ingest_us"`
}

const manifestVersion = 1

// manifestKey is the segment's key for the file holding [first, end).
func manifestKey(first, end uint64) string {
	return path.Join(ManifestDir, fmt.Sprintf("%020d-%020d.json", first, end-1))
}

// encodeManifest is the segment's bytes: deterministic, so that a
// successor publishing the same file writes the same object.
func encodeManifest(e ManifestEntry) ([]byte, error) {
	e.Version = manifestVersion
	if e.Holes == nil {
		e.Holes = []Hole{}
	}
	b, err := json.Marshal(e)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// DecodeManifest decodes and checks one segment.
func DecodeManifest(b []byte) (ManifestEntry, error) {
	var e ManifestEntry
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		return ManifestEntry{}, fmt.Errorf("manifest segment: %w", err)
	}
	if err := e.check(); err != nil {
		return ManifestEntry{}, fmt.Errorf("manifest segment [%d, %d): %w", e.First, e.End, err)
	}
	return e, nil
}

func (e ManifestEntry) check() error {
	switch {
	case e.Version != manifestVersion:
		return fmt.Errorf("version %d, want %d", e.Version, manifestVersion)
	case e.End <= e.First:
		return fmt.Errorf("empty range")
	case e.Object == "" || strings.HasPrefix(e.Object, "/"):
		return fmt.Errorf("object %q", e.Object)
	case e.Rows < 0 || e.Bytes < 0:
		return fmt.Errorf("negative rows or bytes")
	}
	var inHoles uint64
	for i, h := range e.Holes {
		if h.End <= h.First || h.First < e.First || h.End > e.End || (i > 0 && h.First <= e.Holes[i-1].End) {
			return fmt.Errorf("hole [%d, %d) out of order, empty, touching the previous one or outside the range", h.First, h.End)
		}
		inHoles += h.End - h.First
	}
	if uint64(e.Rows) != e.End-e.First-inHoles {
		return fmt.Errorf("%d rows, but the range less its holes is %d offsets", e.Rows, e.End-e.First-inHoles)
	}
	return nil
}

// holeAt returns the hole holding offset, if any.
func (e ManifestEntry) holeAt(offset uint64) (Hole, bool) {
	i, found := slices.BinarySearchFunc(e.Holes, offset, func(h Hole, o uint64) int {
		switch {
		case h.End <= o:
			return -1
		case h.First > o:
			return 1
		}
		return 0
	})
	if !found {
		return Hole{}, false
	}
	return e.Holes[i], true
}
