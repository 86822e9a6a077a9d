package sequencer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Commit-log checkpoints (docs/design.md §5, docs/format/commit-log.md §5)
// keep what a takeover, a standby and a fresh reader read independent of
// the history's length. Every Config.Checkpoint interval the leader:
//
//  1. rolls its commit ledger (leader_roll.go), so that every ledger
//     before the new one is closed and never changes;
//  2. replays those closed ledgers on top of the previous checkpoint's
//     state (buildCheckpoint, no I/O) and writes the newly settled map as
//     chunks, then the index pages (the previous last page again unless
//     it was full), the state and the index root, into a new checkpoint
//     ledger, which it seals (every entry confirmed, closed);
//  3. switches seq/checkpoint to it by CAS (epoch and the pointer's
//     revision): from here on a takeover starts from it;
//  4. deletes the commit ledgers before the new one, then drops them from
//     seq/commit-ledgers by CAS;
//  5. deletes the previous checkpoint ledger unless the new index names
//     it, and those of pages dropped under the floor
//     (unreferencedCheckpointLedgers).
//
// A crash between any two steps leaves a readable, consistent state: until
// step 3 the old pointer and the whole list stand (an abandoned checkpoint
// ledger carries no offsets; the next leader closes it like any
// older-epoch ledger); after it, a takeover replays the list from the
// pointer's FirstKept on and never reads the ledgers before it, listed
// or deleted. Steps 4–5 are repeated, harmlessly, by the next checkpoint.

// CheckpointConfig configures commit-log checkpoints.
type CheckpointConfig struct {
	// Records: a checkpoint is written once this many commit records were
	// confirmed since the last one. Default 100,000; negative disables
	// checkpoints.
	Records int
	// Interval: a checkpoint is also written once this long passed since
	// the last one, if any record was confirmed meanwhile. Default 10 s:
	// each checkpoint rolls the commit ledger, whose records lie in every
	// WAL segment written since, so until the next one a store keeps that
	// many seconds of writes on disk whatever retention deleted.
	Interval time.Duration
	// ChunkSegments bounds the segments (ledger entries and holes) of one
	// chunk entry, the unit a reader loads. Default 16,384.
	ChunkSegments int
	// PageChunks bounds the chunks one index page lists. Default 1,024:
	// the index root grows by one page per 16M segments of history.
	PageChunks int
	// Floor, if set, is the log's start offset (retention): chunks ending
	// at or below it are dropped from the next checkpoint, and checkpoint
	// ledgers left with none are deleted. Nil: 0.
	Floor func() uint64
	// Timeout bounds one checkpoint's steps 2–5. Default 2 min.
	Timeout time.Duration
}

// Validate fills defaults.
func (c *CheckpointConfig) Validate() error {
	if c.Records == 0 {
		c.Records = 100_000
	}
	if c.Interval == 0 {
		c.Interval = 10 * time.Second
	}
	if c.ChunkSegments == 0 {
		c.ChunkSegments = 16384
	}
	if c.PageChunks == 0 {
		c.PageChunks = 1024
	}
	if c.Timeout == 0 {
		c.Timeout = 2 * time.Minute
	}
	if c.Interval < 0 || c.ChunkSegments < 1 || c.PageChunks < 1 || c.Timeout < 0 {
		return errors.New("sequencer: invalid checkpoint Interval, ChunkSegments, PageChunks or Timeout")
	}
	return nil
}

func (c CheckpointConfig) floor() uint64 {
	if c.Floor == nil {
		return 0
	}
	return c.Floor()
}

// errCheckpointRoll is the reason of a roll a checkpoint asked for.
var errCheckpointRoll = errors.New("a checkpoint is due")

// checkpointTrack is the newest checkpoint this leader knows (read at its
// takeover, then its own), guarded by leader.listMu.
type checkpointTrack struct {
	pointer CheckpointPointer
	rev     int64
	state   *CheckpointState // nil: none
	index   *CheckpointIndex // nil: none, or not read yet
	// referenced are the checkpoint ledgers a checkpoint this leader wrote
	// names (its own, its pages' and their chunks'); dropped the previous
	// index's pages it dropped under the floor.
	referenced map[uint64]bool
	dropped    []PageRef
}

// startFromCheckpoint makes the checkpoint a takeover started from the
// one the leader's next checkpoint builds on.
func (l *leader) startFromCheckpoint(ctx context.Context, head commitLogHead) error {
	l.ckptLedgers, _ = l.node.cfg.Ledgers.(CheckpointLedgers)
	l.ckpt = checkpointTrack{pointer: head.pointer, rev: head.pointerRev}
	// Due an Interval after the last one was written, whoever wrote it (a
	// leader that changed more often than that never wrote one); the
	// first one an Interval after the first takeover.
	l.mu.lastCheckpoint = time.Now()
	if head.pointer.WrittenAt != 0 {
		l.mu.lastCheckpoint = time.UnixMilli(head.pointer.WrittenAt)
	}
	if head.pointer.IsZero() || l.ckptLedgers == nil {
		return nil
	}
	// The replay read the state unless the cache held it: read it again
	// (one entry) for the next checkpoint, which starts from it.
	var err error
	l.ckpt.state, err = readCheckpointState(ctx, l.ckptLedgers, head.pointer)
	return err
}

// floorCheckpointAfter is how soon after the last checkpoint a moved floor
// (retention moved the log start) makes the next one due: the commit
// ledger's records pin every WAL segment written since the last
// checkpoint, and only a checkpoint's roll lets the stores free the
// segments retention emptied.
const floorCheckpointAfter = time.Second

// maybeCheckpointLocked asks for a roll when a checkpoint is due; the roll
// starts it (leader_roll.go).
func (l *leader) maybeCheckpointLocked() {
	cfg := l.node.cfg.Checkpoint
	if l.ckptLedgers == nil || cfg.Records < 0 || l.mu.checkpointing || l.mu.deposed || !l.mu.m.Serving() {
		return
	}
	since, floor := time.Since(l.mu.lastCheckpoint), cfg.floor()
	// Readers below a map trimmed past the last checkpoint wait for the
	// next one (hardRetainFactor); it is due as soon as a moved floor's.
	waitedFor := floor > l.mu.checkpointFloor || l.cm.trimmedPastCheckpoint()
	due := l.mu.recordsSince >= cfg.Records ||
		(l.mu.recordsSince > 0 && (since >= cfg.Interval || (waitedFor && since >= floorCheckpointAfter)))
	if !due {
		return
	}
	l.mu.checkpointing, l.mu.checkpointAwaitsRoll = true, true
	l.mu.recordsSince, l.mu.lastCheckpoint, l.mu.checkpointFloor = 0, time.Now(), floor
	if l.mu.rollWanted == nil {
		l.mu.rollWanted = errCheckpointRoll
	}
	l.maybeRollLocked()
}

// startCheckpointLocked runs a checkpoint of everything before firstKept,
// the commit ledger a roll just opened, if one waited for that roll.
func (l *leader) startCheckpointLocked(firstKept uint64) {
	if !l.mu.checkpointAwaitsRoll {
		return
	}
	l.mu.checkpointAwaitsRoll = false
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		start := time.Now()
		p, err := l.writeCheckpoint(firstKept)
		l.mu.Lock()
		l.mu.checkpointing = false
		l.mu.Unlock()
		switch {
		case err != nil && l.ctx.Err() == nil:
			l.node.cfg.Logger.Warn("sequencer: checkpoint failed; the next one covers its ledgers", "epoch", l.epoch, "err", err)
		case err == nil:
			l.node.noteCheckpoint(p, time.Since(start))
			l.node.cfg.Logger.Info("sequencer: checkpoint written", "epoch", l.epoch, "ledger", p.Ledger,
				"covers", Range{p.Start, p.End}, "first_kept", firstKept, "took", time.Since(start))
		}
	}()
}

// writeCheckpoint does steps 2–5 for the commit ledgers before firstKept.
func (l *leader) writeCheckpoint(firstKept uint64) (CheckpointPointer, error) {
	ctx, cancel := context.WithTimeout(l.ctx, l.node.cfg.Checkpoint.Timeout)
	defer cancel()
	l.listMu.Lock()
	prev, list := l.ckpt, l.list
	l.listMu.Unlock()
	replaced, err := replacedLedgers(commitLogHead{pointer: prev.pointer, list: list}, firstKept)
	if err != nil {
		return CheckpointPointer{}, err
	}
	if prev.index == nil && !prev.pointer.IsZero() {
		if prev.index, err = readCheckpointIndex(ctx, l.ckptLedgers, prev.pointer); err != nil {
			return CheckpointPointer{}, err
		}
	}
	// The index's last page is written again with the new chunks unless
	// it is full: read it (one entry).
	var lastPage []ChunkRef
	if prev.index != nil && len(prev.index.Pages) > 0 {
		if lastPage, err = readCheckpointPage(ctx, l.ckptLedgers, prev.index.Pages[len(prev.index.Pages)-1]); err != nil {
			return CheckpointPointer{}, err
		}
	}
	var entries [][]byte
	for _, id := range replaced {
		p, err := l.ctl.ReadClosedCommitLog(ctx, id)
		if err != nil {
			return CheckpointPointer{}, fmt.Errorf("commit ledger %d: %w", id, err)
		}
		entries = append(entries, p...)
	}
	cfg := l.node.cfg.Checkpoint
	b, err := buildCheckpoint(prev.state, prev.index, lastPage, entries, cfg.floor(), cfg.ChunkSegments, cfg.PageChunks)
	if err != nil {
		return CheckpointPointer{}, err
	}
	next, err := l.sealCheckpoint(ctx, b, firstKept)
	if err == nil {
		err = l.step("sealed")
	}
	if err != nil {
		return CheckpointPointer{}, err
	}
	if err := l.switchTo(ctx, prev.rev, next); err != nil {
		return CheckpointPointer{}, err
	}
	l.cm.checkpointed(next.pointer.End)
	if err := l.step("switched"); err != nil {
		return CheckpointPointer{}, err
	}
	return next.pointer, l.tidyAfter(ctx, prev, next, firstKept)
}

// step calls the test hook after a checkpoint step.
func (l *leader) step(name string) error {
	if l.node.checkpointStep == nil {
		return nil
	}
	return l.node.checkpointStep(name)
}

// replacedLedgers are the commit ledgers a checkpoint folds: from the
// previous checkpoint's FirstKept (the list's start without one) up to
// firstKept.
func replacedLedgers(head commitLogHead, firstKept uint64) ([]uint64, error) {
	kept, err := head.kept()
	if err != nil {
		return nil, err
	}
	ids := kept.ids()
	i := slices.Index(ids, firstKept)
	if i < 0 {
		return nil, fmt.Errorf("sequencer: commit ledger %d is not listed", firstKept)
	}
	return ids[:i], nil
}

// sealCheckpoint writes b into a new checkpoint ledger and seals it.
func (l *leader) sealCheckpoint(ctx context.Context, b checkpointBuild, firstKept uint64) (checkpointTrack, error) {
	cw, err := l.ckptLedgers.CreateCheckpointLog(ctx, l.epoch, l.electionKey)
	if err != nil {
		return checkpointTrack{}, err
	}
	fail := func(err error) (checkpointTrack, error) { cw.Abandon(); return checkpointTrack{}, err }
	pages, ix := b.layout(l.epoch, cw.ID(), l.node.cfg.Checkpoint.PageChunks)
	payloads := make([][]byte, 0, len(b.Chunks)+len(pages))
	for _, chunk := range b.Chunks {
		payloads = append(payloads, EncodeCheckpointChunk(nil, chunk))
	}
	referenced := map[uint64]bool{cw.ID(): true}
	for _, page := range pages {
		payloads = append(payloads, EncodeCheckpointPage(nil, page))
		for _, c := range page {
			referenced[c.Ledger] = true
		}
	}
	for _, pg := range ix.Pages {
		referenced[pg.Ledger] = true
	}
	for i, p := range payloads { // entries 0…: layout named them so
		if entry, err := cw.Append(p); err != nil || entry != int64(i) {
			return fail(fmt.Errorf("append checkpoint entry %d (got %d): %v", i, entry, err))
		}
	}
	st := b.State
	st.Epoch = l.epoch
	stateEntry, err := cw.Append(EncodeCheckpointState(nil, st))
	if err == nil {
		err = l.step("appended")
	}
	if err != nil {
		return fail(err)
	}
	indexEntry, err := cw.Append(EncodeCheckpointIndex(nil, ix))
	if err != nil {
		return fail(err)
	}
	if _, err := cw.Seal(ctx); err != nil {
		return fail(err)
	}
	p := CheckpointPointer{Version: 1, Ledger: cw.ID(), StateEntry: stateEntry, IndexEntry: indexEntry,
		Start: ix.Start, End: ix.End, C: st.C, Epoch: l.epoch, FirstKept: firstKept, FirstLedger: ix.FirstLedger(),
		WrittenAt: time.Now().UnixMilli()}
	return checkpointTrack{pointer: p, state: &st, index: &ix, referenced: referenced, dropped: b.DroppedPages}, nil
}

// switchTo is step 3: the pointer's CAS. From its success on, next is the
// checkpoint every takeover starts from.
func (l *leader) switchTo(ctx context.Context, prevRev int64, next checkpointTrack) error {
	l.listMu.Lock()
	defer l.listMu.Unlock()
	rev, err := l.store.switchCheckpoint(ctx, prevRev, next.pointer)
	if err != nil {
		return err
	}
	next.rev = rev
	l.ckpt = next
	return nil
}

// tidyAfter is steps 4–5; what fails is logged and left for the next
// checkpoint (the commit ledgers) or for retention (checkpoint ledgers).
// Only the test hook's error is returned.
func (l *leader) tidyAfter(ctx context.Context, prev, next checkpointTrack, firstKept uint64) error {
	l.listMu.Lock()
	list := l.list
	l.listMu.Unlock()
	ids := list.ids()
	replaced := ids[:max(0, slices.Index(ids, firstKept))]
	for _, id := range replaced {
		if err := l.ckptLedgers.DeleteLedger(ctx, id); err != nil {
			l.node.cfg.Logger.Info("sequencer: could not delete a checkpointed commit ledger", "ledger", id, "err", err)
			return nil // listed still, so the next checkpoint tries again
		}
	}
	if err := l.step("deleted"); err != nil {
		return err
	}
	l.listMu.Lock()
	truncated, rev, err := l.store.truncateCommitLedgers(ctx, l.list, l.listRev, firstKept)
	if err == nil {
		l.list, l.listRev = truncated, rev
	}
	l.listMu.Unlock()
	if err != nil {
		l.node.cfg.Logger.Info("sequencer: could not truncate the commit-ledger list", "err", err)
	}
	if err := l.step("truncated"); err != nil {
		return err
	}
	for _, id := range unreferencedCheckpointLedgers(prev, next) {
		if err := l.ckptLedgers.DeleteLedger(ctx, id); err != nil {
			l.node.cfg.Logger.Info("sequencer: could not delete an old checkpoint ledger", "ledger", id, "err", err)
		}
	}
	return nil
}

// unreferencedCheckpointLedgers are the checkpoint ledgers next no
// longer needs: prev's own unless next names it (a kept page or chunk in
// it; any chunk of prev's lies in a page prev or next wrote), and those of
// the pages next dropped that lie below every ledger it names. Checkpoint
// ledgers older still that held only chunks are left to retention: any
// below next's FirstLedger (in the pointer) may go.
func unreferencedCheckpointLedgers(prev, next checkpointTrack) []uint64 {
	var out []uint64
	seen := map[uint64]bool{}
	consider := func(id uint64, below bool) {
		if id != 0 && !next.referenced[id] && !seen[id] && below {
			seen[id] = true
			out = append(out, id)
		}
	}
	consider(prev.pointer.Ledger, true)
	for _, pg := range next.dropped {
		consider(pg.Ledger, next.index.FirstLedger() == 0 || pg.Ledger < next.index.FirstLedger())
	}
	return out
}

// readCheckpointState reads the state entry a pointer names (nil for the
// zero pointer).
func readCheckpointState(ctx context.Context, ledgers CheckpointLedgers, p CheckpointPointer) (*CheckpointState, error) {
	if p.IsZero() {
		return nil, nil
	}
	payloads, err := ledgers.ReadEntries(ctx, p.Ledger, p.StateEntry, p.StateEntry)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %d state: %w", p.Ledger, err)
	}
	st, err := DecodeCheckpointState(payloads[0])
	if err != nil {
		return nil, fmt.Errorf("checkpoint %d state: %w", p.Ledger, err)
	}
	return &st, nil
}

// readCheckpointPage reads an index page.
func readCheckpointPage(ctx context.Context, ledgers CheckpointLedgers, pg PageRef) ([]ChunkRef, error) {
	payloads, err := ledgers.ReadEntries(ctx, pg.Ledger, pg.Entry, pg.Entry)
	if err != nil {
		return nil, fmt.Errorf("checkpoint page %d/%d: %w", pg.Ledger, pg.Entry, err)
	}
	chunks, err := DecodeCheckpointPage(payloads[0])
	if err != nil {
		return nil, fmt.Errorf("checkpoint page %d/%d: %w", pg.Ledger, pg.Entry, err)
	}
	if chunks[0].Range.First != pg.Range.First || chunks[len(chunks)-1].Range.End != pg.Range.End {
		return nil, fmt.Errorf("%w: page %d/%d does not tile %v", ErrCorruptCheckpoint, pg.Ledger, pg.Entry, pg.Range)
	}
	return chunks, nil
}

// readCheckpointIndex reads the index entry a pointer names.
func readCheckpointIndex(ctx context.Context, ledgers CheckpointLedgers, p CheckpointPointer) (*CheckpointIndex, error) {
	payloads, err := ledgers.ReadEntries(ctx, p.Ledger, p.IndexEntry, p.IndexEntry)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %d index: %w", p.Ledger, err)
	}
	ix, err := DecodeCheckpointIndex(payloads[0])
	if err != nil {
		return nil, fmt.Errorf("checkpoint %d index: %w", p.Ledger, err)
	}
	if ix.End != p.End || ix.Start != p.Start {
		return nil, fmt.Errorf("%w: checkpoint %d index covers %v, its pointer says %v", ErrCorruptCheckpoint,
			p.Ledger, Range{ix.Start, ix.End}, Range{p.Start, p.End})
	}
	return &ix, nil
}
