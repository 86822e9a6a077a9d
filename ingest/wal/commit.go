package wal

import (
	"fmt"
	"sync"
	"time"

	"orderlog/ingest/wal/walfs"
	"orderlog/internal/event"
	"orderlog/internal/fileutil"
)

// batch is a group of records written together and covered by one
// fdatasync. Batches complete in journal order.
type batch struct {
	chunks []chunk
	// end is the journal position just past the batch's last record.
	end journalPos
	// sync forces an fdatasync even under the interval policy.
	sync bool
	done chan struct{}
	err  error
}

// chunk is the part of a batch that goes to one segment.
type chunk struct {
	seg   uint32
	data  []byte
	metas []recordMeta
}

// enqueueLocked frames r into the pending batch, applies it to the index and
// returns its position and batch. The caller has checked the store is
// usable.
func (s *Store) enqueueLocked(r *Record) (position, *batch) {
	var header [RecordHeaderSize]byte
	return s.enqueueFramedLocked(r, appendRecordHeader(header[:0], r))
}

// enqueueFramedLocked is enqueueLocked for a record whose header (from
// appendRecordHeader) is already built: checksumming outside the lock keeps
// appenders from serializing on it. The payload is copied once, into the
// batch.
func (s *Store) enqueueFramedLocked(r *Record, header []byte) (position, *batch) {
	size := uint32(len(header) + len(r.Payload))
	if s.mu.tail.off > segmentHeaderSize && int64(s.mu.tail.off)+int64(size) > s.cfg.SegmentSize {
		s.mu.tail = journalPos{seg: s.mu.tail.seg + 1, off: segmentHeaderSize}
	}
	b := s.mu.pending
	if b == nil {
		b = &batch{done: make(chan struct{})}
		s.mu.pending = b
		s.wake()
	}
	if len(b.chunks) == 0 || b.chunks[len(b.chunks)-1].seg != s.mu.tail.seg {
		b.chunks = append(b.chunks, chunk{seg: s.mu.tail.seg, data: getBatchBuffer()})
	}
	c := &b.chunks[len(b.chunks)-1]
	pos := position{seg: s.mu.tail.seg, off: s.mu.tail.off, size: size}
	meta := recordMeta{Type: r.Type, Ledger: r.Ledger, Entry: r.Entry, LAC: r.LAC, Offset: pos.off, Size: size}
	c.data = append(append(c.data, header...), r.Payload...)
	c.metas = append(c.metas, meta)
	s.mu.tail.off += size
	b.end = s.mu.tail
	s.mu.pendingBytes += int(size)
	s.mu.idx.apply(meta, pos.seg, s.id.incarnation)
	return pos, b
}

// usableLocked returns why the store cannot take writes, or nil.
func (s *Store) usableLocked() error {
	if s.mu.closing {
		return ErrClosed
	}
	return s.mu.failed
}

// commitLoop writes pending batches one at a time; appends arriving while a
// batch is written and synced form the next batch (group commit).
func (s *Store) commitLoop() {
	defer close(s.stopped)
	defer close(s.retired) // the commit loop is its only sender
	var tick <-chan time.Time
	if s.cfg.SyncInterval > 0 {
		t := time.NewTicker(s.cfg.SyncInterval)
		defer t.Stop()
		tick = t.C
	}
	unsynced := false
	lastSync := time.Now()
	var b *batch
	for {
		if b == nil {
			s.waitSyncDelay(lastSync)
			var closing bool
			b, closing = s.takePending()
			if b == nil && closing {
				if unsynced {
					s.complete(nil, s.syncActive(), false)
				}
				return
			}
		}
		if b != nil {
			err := s.writeBatch(b)
			if err == nil {
				unsynced = true
				if s.cfg.SyncInterval == 0 || b.sync || time.Since(lastSync) >= s.cfg.SyncInterval {
					err = s.syncActive()
					unsynced, lastSync = false, time.Now()
				}
			}
			// With a sync delay the next batch is taken after the delay, so
			// that it holds what arrived meanwhile.
			b = s.complete(b, err, s.cfg.SyncDelay == 0)
			continue
		}
		select {
		case <-s.kick:
		case <-tick:
			if unsynced {
				s.complete(nil, s.syncActive(), false)
				unsynced, lastSync = false, time.Now()
			}
		}
	}
}

// waitSyncDelay sleeps until SyncDelay has passed since lastSync while a
// batch is pending, unless it already holds syncDelayFullBytes. With none
// pending it returns at once: the loop waits for one, and sleeps what is
// left of the delay when it comes.
func (s *Store) waitSyncDelay(lastSync time.Time) {
	if s.cfg.SyncDelay == 0 {
		return // the default: no clock read on every turn of the loop
	}
	d := s.cfg.SyncDelay - time.Since(lastSync)
	if d <= 0 {
		return
	}
	s.mu.Lock()
	pending, full := s.mu.pending != nil, s.mu.pendingBytes >= syncDelayFullBytes
	s.mu.Unlock()
	if pending && !full {
		s.stats.delayed.Add(1)
		sleepPrecisely(d)
	}
}

// syncDelayFullBytes is the batch size the commit delay no longer waits to
// grow. The delay is for the small batches of a moderate load (~120 KiB per
// flush at half of the peak rate here); at the peak, batches are ~1 MiB,
// and waiting only cost rate (−10–14 % with a 150 µs delay).
const syncDelayFullBytes = 512 << 10

// sleepPrecisely blocks the calling thread for d (plus the kernel's timer
// slack, 50 µs by default). time.Sleep is not precise enough for a commit
// delay of a few hundred µs: while the process is otherwise idle the
// runtime waits for its timers in epoll, whose timeout is whole
// milliseconds, and a 150 µs time.Sleep measured 1.09 ms here (nanosleep:
// 205 µs). The commit loop is one goroutine; blocking its thread for a
// moment costs the runtime nothing (its P is handed on if needed).
func sleepPrecisely(d time.Duration) {
	fileutil.SleepPrecisely(d)
}

// takePending makes the pending batch the in-flight one.
func (s *Store) takePending() (b *batch, closing bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.takePendingLocked(), s.mu.closing
}

func (s *Store) takePendingLocked() *batch {
	b := s.mu.pending
	s.mu.pending, s.mu.inflight, s.mu.pendingBytes = nil, b, 0
	s.space.Broadcast()
	return b
}

func (s *Store) syncActive() error {
	start := time.Now()
	err := s.active.Sync()
	took := time.Since(start)
	s.stats.observeSync(took)
	if err != nil {
		err = fmt.Errorf("fdatasync %s: %w", segmentName(s.activeSeq), err)
	}
	if s.cfg.SlowSync > 0 && took >= s.cfg.SlowSync {
		s.cfg.Events.SlowSync(event.SyncInfo{Dir: s.dir, Segment: segmentName(s.activeSeq), Duration: took,
			Threshold: s.cfg.SlowSync, Err: err})
	}
	return err
}

// complete completes b (nil for a bare interval sync) and, if takeNext,
// takes the next pending batch in the same critical section, so that its
// write starts before the appenders just completed wake up and contend for
// the lock. An error fails b, every batch queued after it, and the store:
// an fsync is never retried as if the data were safe.
func (s *Store) complete(b *batch, err error, takeNext bool) (next *batch) {
	s.mu.Lock()
	var failedPending *batch
	if err != nil {
		if s.mu.failed == nil {
			s.mu.failed = fmt.Errorf("%w: %w", ErrStoreFailed, err)
		}
		failedPending, s.mu.pending, s.mu.pendingBytes = s.mu.pending, nil, 0
		if failedPending != nil {
			failedPending.err = s.mu.failed
		}
		if b != nil {
			b.err = s.mu.failed
		}
		s.mu.inflight = nil
		s.space.Broadcast()
	} else {
		if b != nil {
			s.mu.durable = b.end
		}
		s.mu.inflight = nil
		if takeNext {
			next = s.takePendingLocked()
		}
	}
	s.mu.Unlock()
	if b != nil {
		close(b.done)
	}
	if failedPending != nil {
		close(failedPending.done)
	}
	return next
}

// writeBatch writes b's chunks, rolling to new segments as they begin.
func (s *Store) writeBatch(b *batch) error {
	for i := range b.chunks {
		c := &b.chunks[i]
		if c.seg != s.activeSeq {
			if err := s.roll(c.seg); err != nil {
				return err
			}
		}
		start := time.Now()
		_, err := s.active.Write(c.data)
		s.stats.writeNanos.Add(int64(time.Since(start)))
		if err != nil {
			return fmt.Errorf("write %s: %w", segmentName(s.activeSeq), err)
		}
		s.activeMetas = append(s.activeMetas, c.metas...)
		s.stats.bytes.Add(int64(len(c.data)))
		s.disk.wrote(len(c.data))
		putBatchBuffer(c.data) // written: payloads are not kept in memory
		c.data = nil
	}
	s.stats.batches.Add(1)
	return nil
}

// roll makes the active segment durable, checkpoints its index and starts
// segment seq.
func (s *Store) roll(seq uint32) error {
	if err := s.syncActive(); err != nil {
		return err
	}
	checkpoint := s.activeCheckpoint()
	f, err := s.createSegment(seq)
	if err != nil {
		return err
	}
	s.retired <- retiredSegment{file: s.active, checkpoint: checkpoint}
	s.active, s.activeSeq, s.activeMetas = f, seq, nil
	s.mu.Lock()
	s.mu.segments = append(s.mu.segments, seq)
	s.mu.Unlock()
	return nil
}

// retiredSegment is a sealed segment on its way to the release loop, with
// the index checkpoint taken when it was sealed.
type retiredSegment struct {
	file       walfs.File
	checkpoint *segmentIndex
}

// retiredBacklog is how many sealed segments may wait for the release loop
// before a roll waits for it.
const retiredBacklog = 4

// releaseLoop writes each sealed segment's index checkpoint, then drops
// the segment from the page cache and closes it, off the commit loop: every
// append queued behind a roll waits for what the roll does, and at half of
// the peak rate the journal rolls 3–4 times a second.
//   - The checkpoint (a file written, fsynced, renamed and its directory
//     fsynced) took 0.4–0.7 ms, several ms while the disk's flushes were
//     slow. Until it is durable the segment is simply scanned by a recovery
//     (it was fsynced before it was sealed), and dead segments are removed
//     only below it (Store.mu.checkpointed).
//   - The drop took 4–14 ms per 64 MiB. The segment is durable, so its
//     pages need not pile up behind the journal, and new writes reuse them:
//     on a VM each page the cache grows into is memory the host backs on
//     first touch, and at half of the peak rate the journal's write(2) time
//     per 6 s rose from 0.5 s to 1.4 s as the cache grew to 9 GiB (0.4–0.5 s
//     with the drop). Reads of sealed segments go to the disk.
func (s *Store) releaseLoop() {
	defer close(s.released)
	for r := range s.retired {
		err := s.writeCheckpoint(r.checkpoint)
		s.mu.Lock()
		if err == nil {
			s.mu.checkpointed = r.checkpoint.seq
		} else if s.mu.failed == nil {
			// As when a roll failed: no more appends. What was written is
			// durable and stays acknowledged.
			s.mu.failed = fmt.Errorf("%w: %w", ErrStoreFailed, err)
		}
		s.checkpoints.Broadcast()
		s.mu.Unlock()
		_ = r.file.DropCache()
		r.file.Close()
	}
}

// activeCheckpoint is the index checkpoint of the active segment as it
// stands: its records, after a delete meta for every deleted ledger.
func (s *Store) activeCheckpoint() *segmentIndex {
	x := &segmentIndex{seq: s.activeSeq, incarnation: s.id.incarnation, end: segmentHeaderSize}
	if n := len(s.activeMetas); n > 0 {
		last := s.activeMetas[n-1]
		x.end = int64(last.Offset) + int64(last.Size)
	}
	s.mu.Lock()
	x.metas = append(deletedMetasLocked(s.mu.idx), s.activeMetas...)
	s.mu.Unlock()
	return x
}

// writeCheckpoint makes x durable. Its segment's data must already be.
func (s *Store) writeCheckpoint(x *segmentIndex) error {
	if err := writeFileAtomic(s.fs, s.dir, indexName(x.seq), encodeSegmentIndex(x)); err != nil {
		return fmt.Errorf("checkpoint index of %s: %w", segmentName(x.seq), err)
	}
	return nil
}

// deletedMetasLocked lists every deleted ledger as a delete meta. Each
// checkpoint starts with them, so that removing the segment that held a
// delete record never makes the store forget the deletion. Replaying them
// early is harmless: records of a deleted ledger are ignored.
func deletedMetasLocked(x *index) []recordMeta {
	metas := make([]recordMeta, 0, len(x.deleted))
	for ledger := range x.deleted {
		metas = append(metas, recordMeta{Type: RecordDelete, Ledger: ledger, Entry: -1, LAC: -1})
	}
	return metas
}

// createSegment creates segment seq with its header, durably.
func (s *Store) createSegment(seq uint32) (walfs.File, error) {
	name := s.path(segmentName(seq))
	file, err := s.fs.Create(name)
	if err != nil {
		return nil, fmt.Errorf("create segment: %w", err)
	}
	// Advisory: without it appends allocate as they go. An append into
	// blocks the file does not have yet makes ext4 allocate them unwritten
	// and convert them when the write completes, inside the fdatasync that
	// waits for it. On segments that filled up in a few pieces, a
	// conversion freed an extent-tree block and the next took the same
	// block back, and with the `discard` mount option every free is a
	// synchronous TRIM: 300–600 a second at half of the peak rate here,
	// each on some fdatasync's path. With the blocks reserved up front
	// (~0.05 ms per segment) a run issues 2–3.
	_ = file.Preallocate(s.cfg.SegmentSize)
	h := encodeSegmentHeader(segmentHeader{seq: seq, incarnation: s.id.incarnation, storeID: s.id.storeID})
	if _, err := file.Write(h); err != nil {
		file.Close()
		return nil, fmt.Errorf("write segment header: %w", err)
	}
	if err := file.Sync(); err != nil {
		file.Close()
		return nil, fmt.Errorf("sync segment header: %w", err)
	}
	if err := s.fs.SyncDir(s.dir); err != nil {
		file.Close()
		return nil, fmt.Errorf("sync dir: %w", err)
	}
	return file, nil
}

// giveBackReservation frees the blocks a segment sealed before it filled
// (at Close) still has reserved beyond its length: truncating a file to its
// own length drops them and changes no byte. Advisory, like the
// reservation. A segment sealed by a roll keeps less than one record's
// worth, and truncating it there would put a file-system change (and, with
// online discard, a TRIM) next to the commit loop's fdatasyncs.
func giveBackReservation(f walfs.File) {
	if size, err := f.Size(); err == nil {
		_ = f.Truncate(size)
	}
}

// Batch buffers are pooled: at thousands of batches a second, allocating
// them fresh makes the garbage collector compete with the commit loop for
// the CPUs. (Records are framed straight into them, see
// enqueueFramedLocked.)
var batchBuffers sync.Pool

const batchBufferSize = 64 << 10

func getBatchBuffer() []byte {
	if b, ok := batchBuffers.Get().(*[]byte); ok {
		return (*b)[:0]
	}
	return make([]byte, 0, batchBufferSize)
}

func putBatchBuffer(b []byte) {
	if cap(b) > 4<<20 {
		return // do not pin huge buffers
	}
	b = b[:0]
	batchBuffers.Put(&b)
}
