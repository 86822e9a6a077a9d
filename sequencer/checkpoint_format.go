package sequencer

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The entries of a checkpoint ledger (docs/format/commit-log.md §5): chunks
// of the settled commit map in offset order, index pages listing chunks,
// then one state entry and one index entry (the pages' root). Only framing and encoding live here; checkpoint.go decides
// what goes in them.

// CheckpointVersion is the version byte of every checkpoint entry.
const CheckpointVersion = 1

// Checkpoint entry kinds (the byte after the version).
const (
	checkpointChunk = 1
	checkpointState = 2
	checkpointIndex = 3
	checkpointPage  = 4
)

// Chunk run tags.
const (
	runWritten = 1
	runHole    = 2
)

// ErrCorruptCheckpoint is returned by the checkpoint decoders for an entry
// that the encoders cannot have produced: truncated, another version or
// kind, an empty or wrapping range, a run that is not maximal, a non-minimal
// varint, or trailing bytes. A reader or leader that meets one stops; it
// never skips.
var ErrCorruptCheckpoint = errors.New("sequencer: corrupt checkpoint entry")

// Decoder bounds, so garbage cannot make a decoder allocate without limit.
const (
	maxChunkSegments = 1 << 20
	maxIndexRefs     = 1 << 22
	maxStateRecords  = 1 << 22
)

// ChunkRef names one chunk of a checkpoint: entry Entry of checkpoint
// ledger Ledger holds the segments of [Range.First, Range.End), Holes of
// whose offsets are holes.
type ChunkRef struct {
	Ledger uint64
	Entry  int64
	Range  Range
	Holes  uint64
}

// PageRef names one index page: entry Entry of checkpoint ledger Ledger
// lists the chunks that tile Range, Holes of whose offsets are holes;
// FirstLedger is the ledger of its first chunk (chunks lie in ledgers of
// non-decreasing id, so no page from here on names an older one).
type PageRef struct {
	Ledger      uint64
	Entry       int64
	Range       Range
	Holes       uint64
	FirstLedger uint64
}

// CheckpointIndex is the last entry of a checkpoint ledger, the root of a
// two-level index: the pages that tile [Start, End) in offset order, each
// listing the chunks of its range, and the hole offsets below End (those
// below Start, dropped under a retention floor, included). A reader reads
// the root, then one page and one chunk per lookup; the root grows by one
// page per PageChunks × ChunkSegments segments of history.
type CheckpointIndex struct {
	Epoch uint64 // the leader that wrote it
	Start uint64
	End   uint64
	Holes uint64
	Pages []PageRef
}

// FirstLedger is the oldest checkpoint ledger the index names (0: none):
// every older checkpoint ledger, but the one the pointer names, holds
// nothing a reader needs.
func (ix CheckpointIndex) FirstLedger() uint64 {
	if len(ix.Pages) == 0 {
		return 0
	}
	return ix.Pages[0].FirstLedger
}

// CheckpointState is what a replay of the commit log replaced by the
// checkpoint leaves besides the settled map below the index's End: C, the
// highest epoch, and the records at or above End (decided, not yet part of
// the contiguous settled prefix, or above C and possibly superseded by a
// newer epoch: CommitMap.apply).
type CheckpointState struct {
	Epoch   uint64 // the leader that wrote it
	C       uint64
	Folded  uint64 // CommitMap.Epoch of the replay
	Pending []EpochRecord
}

// EncodeCheckpointChunk appends a chunk entry holding segments (Written
// and Hole records that tile one offset range, in offset order) to dst.
// Consecutive entries of one ledger whose offsets follow each other become
// one run; every hole stays a run of its own, as it was decided.
func EncodeCheckpointChunk(dst []byte, segments []Record) []byte {
	dst = append(dst, CheckpointVersion, checkpointChunk)
	if len(segments) == 0 {
		return binary.AppendUvarint(binary.AppendUvarint(dst, 0), 0)
	}
	dst = binary.AppendUvarint(dst, segments[0].Range.First)
	runs := chunkRuns(segments)
	dst = binary.AppendUvarint(dst, uint64(len(runs)))
	for _, run := range runs {
		first := segments[run[0]]
		if first.Kind == KindHole {
			dst = append(dst, runHole)
			dst = binary.AppendUvarint(dst, first.Range.Len())
			continue
		}
		dst = append(dst, runWritten)
		dst = binary.AppendUvarint(dst, first.Ledger)
		dst = binary.AppendUvarint(dst, uint64(first.Entry))
		dst = binary.AppendUvarint(dst, uint64(run[1]-run[0]))
		for _, s := range segments[run[0]:run[1]] {
			dst = binary.AppendUvarint(dst, s.Range.Len())
		}
	}
	return dst
}

// chunkRuns splits segments into maximal runs [i, j).
func chunkRuns(segments []Record) [][2]int {
	var runs [][2]int
	for i := 0; i < len(segments); {
		j := i + 1
		for j < len(segments) && continuesRun(segments[j-1], segments[j]) {
			j++
		}
		runs = append(runs, [2]int{i, j})
		i = j
	}
	return runs
}

// continuesRun says whether next extends prev's Written run: same ledger,
// the next entry (segments tile, so the offsets follow).
func continuesRun(prev, next Record) bool {
	return prev.Kind == KindWritten && next.Kind == KindWritten && next.Ledger == prev.Ledger && next.Entry == prev.Entry+1
}

// DecodeCheckpointChunk decodes a chunk entry into its segments (Written
// and Hole records, offset order, tiling from the chunk's first offset).
func DecodeCheckpointChunk(p []byte) ([]Record, error) {
	d := decoder{buf: p}
	if err := checkpointHeader(&d, checkpointChunk); err != nil {
		return nil, err
	}
	next := d.uvarint()
	runs := d.uvarint()
	if d.err != nil || runs > uint64(len(p)) || (runs == 0 && next != 0) {
		return nil, ckptFail(&d, "run count")
	}
	var out []Record
	for i := uint64(0); i < runs; i++ {
		var ok bool
		if out, next, ok = decodeRun(&d, out, next); !ok || len(out) > maxChunkSegments {
			return nil, ckptFail(&d, fmt.Sprintf("run %d", i))
		}
	}
	if d.pos != len(p) {
		return nil, ckptFail(&d, "trailing bytes")
	}
	return out, nil
}

// decodeRun appends one run's segments starting at offset next; it
// refuses a Written run that continues the previous one (not maximal).
func decodeRun(d *decoder, out []Record, next uint64) ([]Record, uint64, bool) {
	switch d.byte() {
	case runHole:
		r, ok := spanAt(d, next)
		return append(out, Record{Kind: KindHole, Range: r}), r.End, ok
	case runWritten:
		ledgerID, entry, n := d.uvarint(), d.uvarint(), d.uvarint()
		if d.err != nil || n == 0 || n > maxChunkSegments || entry+n > 1<<62 ||
			(len(out) > 0 && continuesRun(out[len(out)-1], Record{Kind: KindWritten, Ledger: ledgerID, Entry: int64(entry)})) {
			return out, next, false
		}
		for k := uint64(0); k < n; k++ {
			r, ok := spanAt(d, next)
			if !ok {
				return out, next, false
			}
			out = append(out, Record{Kind: KindWritten, Range: r, Ledger: ledgerID, Entry: int64(entry + k)})
			next = r.End
		}
		return out, next, true
	}
	return out, next, false
}

// spanAt reads a length and returns [first, first+length), which must be
// non-empty and must not wrap.
func spanAt(d *decoder, first uint64) (Range, bool) {
	length := d.uvarint()
	if d.err != nil || length == 0 || first+length < first {
		return Range{}, false
	}
	return Range{First: first, End: first + length}, true
}

// EncodeCheckpointIndex appends an index entry (the root) to dst. The
// pages' ranges must tile [ix.Start, ix.End) in order; only their lengths
// are stored.
func EncodeCheckpointIndex(dst []byte, ix CheckpointIndex) []byte {
	dst = append(dst, CheckpointVersion, checkpointIndex)
	dst = binary.LittleEndian.AppendUint64(dst, ix.Epoch)
	dst = binary.AppendUvarint(dst, ix.Start)
	dst = binary.AppendUvarint(dst, ix.Holes)
	dst = binary.AppendUvarint(dst, uint64(len(ix.Pages)))
	for _, pg := range ix.Pages {
		dst = binary.AppendUvarint(dst, pg.Ledger)
		dst = binary.AppendUvarint(dst, uint64(pg.Entry))
		dst = binary.AppendUvarint(dst, pg.Range.Len())
		dst = binary.AppendUvarint(dst, pg.Holes)
		dst = binary.AppendUvarint(dst, pg.FirstLedger)
	}
	return dst
}

// DecodeCheckpointIndex decodes an index entry; End and the pages' ranges
// follow from Start and the lengths.
func DecodeCheckpointIndex(p []byte) (CheckpointIndex, error) {
	d := decoder{buf: p}
	if err := checkpointHeader(&d, checkpointIndex); err != nil {
		return CheckpointIndex{}, err
	}
	ix := CheckpointIndex{Epoch: d.u64(), Start: d.uvarint(), Holes: d.uvarint()}
	n := d.uvarint()
	if d.err != nil || n > maxIndexRefs || n > uint64(len(p)) {
		return CheckpointIndex{}, ckptFail(&d, "page count")
	}
	ix.End = ix.Start
	var pageHoles uint64
	for i := uint64(0); i < n; i++ {
		pg := PageRef{Ledger: d.uvarint()}
		entry := d.uvarint()
		r, ok := spanAt(&d, ix.End)
		pg.Entry, pg.Range, pg.Holes, pg.FirstLedger = int64(entry), r, d.uvarint(), d.uvarint()
		if !ok || d.err != nil || entry > 1<<62 || pg.Holes > r.Len() ||
			(i > 0 && pg.FirstLedger < ix.Pages[i-1].FirstLedger) {
			return CheckpointIndex{}, ckptFail(&d, fmt.Sprintf("page %d", i))
		}
		ix.Pages = append(ix.Pages, pg)
		ix.End, pageHoles = r.End, pageHoles+pg.Holes
	}
	// Holes below End count those of the pages and those dropped below
	// Start, which are at most Start.
	if ix.Holes < pageHoles || ix.Holes-pageHoles > ix.Start {
		return CheckpointIndex{}, ckptFail(&d, "hole count")
	}
	if d.pos != len(p) {
		return CheckpointIndex{}, ckptFail(&d, "trailing bytes")
	}
	return ix, nil
}

// EncodeCheckpointPage appends an index page listing chunks, which must
// tile one range in order, to dst.
func EncodeCheckpointPage(dst []byte, chunks []ChunkRef) []byte {
	dst = append(dst, CheckpointVersion, checkpointPage)
	first := uint64(0)
	if len(chunks) > 0 {
		first = chunks[0].Range.First
	}
	dst = binary.AppendUvarint(dst, first)
	dst = binary.AppendUvarint(dst, uint64(len(chunks)))
	for _, c := range chunks {
		dst = binary.AppendUvarint(dst, c.Ledger)
		dst = binary.AppendUvarint(dst, uint64(c.Entry))
		dst = binary.AppendUvarint(dst, c.Range.Len())
		dst = binary.AppendUvarint(dst, c.Holes)
	}
	return dst
}

// DecodeCheckpointPage decodes an index page into its chunk refs.
func DecodeCheckpointPage(p []byte) ([]ChunkRef, error) {
	d := decoder{buf: p}
	if err := checkpointHeader(&d, checkpointPage); err != nil {
		return nil, err
	}
	next := d.uvarint()
	n := d.uvarint()
	if d.err != nil || n == 0 || n > maxIndexRefs || n > uint64(len(p)) {
		return nil, ckptFail(&d, "chunk count")
	}
	var out []ChunkRef
	for i := uint64(0); i < n; i++ {
		c := ChunkRef{Ledger: d.uvarint()}
		entry := d.uvarint()
		r, ok := spanAt(&d, next)
		c.Entry, c.Range, c.Holes = int64(entry), r, d.uvarint()
		if !ok || d.err != nil || entry > 1<<62 || c.Holes > r.Len() || (i > 0 && c.Ledger < out[i-1].Ledger) {
			return nil, ckptFail(&d, fmt.Sprintf("chunk %d", i))
		}
		out = append(out, c)
		next = r.End
	}
	if d.pos != len(p) {
		return nil, ckptFail(&d, "trailing bytes")
	}
	return out, nil
}

// EncodeCheckpointState appends a state entry to dst; the pending records
// are Written or Hole records.
func EncodeCheckpointState(dst []byte, st CheckpointState) []byte {
	dst = append(dst, CheckpointVersion, checkpointState)
	dst = binary.LittleEndian.AppendUint64(dst, st.Epoch)
	dst = binary.AppendUvarint(dst, st.C)
	dst = binary.AppendUvarint(dst, st.Folded)
	dst = binary.AppendUvarint(dst, uint64(len(st.Pending)))
	for _, r := range st.Pending {
		dst = binary.AppendUvarint(dst, r.Epoch)
		dst = appendRecord(dst, r.Record)
	}
	return dst
}

// DecodeCheckpointState decodes a state entry.
func DecodeCheckpointState(p []byte) (CheckpointState, error) {
	d := decoder{buf: p}
	if err := checkpointHeader(&d, checkpointState); err != nil {
		return CheckpointState{}, err
	}
	st := CheckpointState{Epoch: d.u64(), C: d.uvarint(), Folded: d.uvarint()}
	n := d.uvarint()
	if d.err != nil || n > maxStateRecords || n > uint64(len(p)) {
		return CheckpointState{}, ckptFail(&d, "record count")
	}
	for i := uint64(0); i < n; i++ {
		epoch := d.uvarint()
		r, ok := d.record()
		if !ok || r.Kind == KindWatermark {
			return CheckpointState{}, ckptFail(&d, fmt.Sprintf("record %d", i))
		}
		st.Pending = append(st.Pending, EpochRecord{Epoch: epoch, Record: r})
	}
	if d.pos != len(p) {
		return CheckpointState{}, ckptFail(&d, "trailing bytes")
	}
	return st, nil
}

func checkpointHeader(d *decoder, kind byte) error {
	if v := d.byte(); v != CheckpointVersion {
		return ckptFail(d, fmt.Sprintf("version %d", v))
	}
	if k := d.byte(); k != kind {
		return ckptFail(d, fmt.Sprintf("kind %d, want %d", k, kind))
	}
	return nil
}

func ckptFail(d *decoder, what string) error {
	return fmt.Errorf("%w: %s at byte %d", ErrCorruptCheckpoint, what, d.pos)
}
