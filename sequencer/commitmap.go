package sequencer

import (
	"errors"
	"sync"
)

// ErrBelowRetention is returned by a commit-map subscription from an offset
// below the oldest retained record: load the newest checkpoint (its map
// ends at or above the retained records' floor, see commitMap) and
// subscribe from its end.
var ErrBelowRetention = errors.New("sequencer: offset below the retained commit map")

// commitMap keeps the confirmed commit records a leader serves to readers
// and fans out new ones. Invariants: every Written/Hole record deciding an
// offset ≥ floor is retained, in log order; floor ≤ the newest
// checkpoint's end (a reader that loads it can subscribe from its end)
// unless more than hardRetainFactor × retain records would be kept.
type commitMap struct {
	retain int
	block  int // records per block: blockSize, or less for a small retain
	mu     struct {
		sync.Mutex
		// blocks hold the Written and Hole records in log order, in
		// blocks of cm.block records so appending and trimming never
		// copy them.
		blocks [][]EpochRecord
		count  int
		floor  uint64
		// checkpointEnd is the newest checkpoint's end: records wholly
		// below it may go once more than retain are kept.
		checkpointEnd uint64
		published     EpochRecord // the latest Watermark
		subs          map[*subscriber]struct{}
		closed        bool
	}
}

// subscriber receives records in log order; ch is closed when it falls
// behind or the leader steps down.
type subscriber struct {
	from uint64
	ch   chan []EpochRecord
}

// newCommitMap starts a leader's map with the replayed records below its
// C₀, which all lie at or above checkpointEnd (the newest checkpoint's
// end, 0 for none): below it the map starts from the checkpoint.
func newCommitMap(retain int, replayed []EpochRecord, c0, epoch, checkpointEnd uint64) *commitMap {
	cm := &commitMap{retain: retain, block: min(blockSize, max(1, retain/2))}
	cm.mu.floor, cm.mu.checkpointEnd = checkpointEnd, checkpointEnd
	for _, r := range replayed {
		cm.appendLocked(r)
	}
	cm.mu.published = EpochRecord{Epoch: epoch, Record: Record{Kind: KindWatermark, Watermark: c0}}
	cm.mu.subs = make(map[*subscriber]struct{})
	cm.trimLocked()
	return cm
}

// add appends confirmed records (watermarks included) and fans them out.
func (cm *commitMap) add(recs []EpochRecord) {
	cm.mu.Lock()
	defer cm.mu.Unlock()
	for _, r := range recs {
		if r.Kind == KindWatermark {
			if r.Watermark > cm.mu.published.Watermark {
				cm.mu.published = r
			}
			continue
		}
		cm.appendLocked(r)
	}
	cm.trimLocked()
	for s := range cm.mu.subs {
		var out []EpochRecord
		for _, r := range recs {
			if r.Kind == KindWatermark || r.Range.End > s.from {
				out = append(out, r)
			}
		}
		if len(out) == 0 {
			continue
		}
		select {
		case s.ch <- out:
		default: // too slow: it must reconnect
			delete(cm.mu.subs, s)
			close(s.ch)
		}
	}
}

const blockSize = 4096

func (cm *commitMap) appendLocked(r EpochRecord) {
	n := len(cm.mu.blocks)
	if n == 0 || len(cm.mu.blocks[n-1]) == cm.block {
		cm.mu.blocks = append(cm.mu.blocks, make([]EpochRecord, 0, cm.block))
		n++
	}
	cm.mu.blocks[n-1] = append(cm.mu.blocks[n-1], r)
	cm.mu.count++
}

// hardRetainFactor bounds the records kept while no checkpoint passes
// them (checkpoints failing): beyond hardRetainFactor × retain the oldest
// go anyway, and readers that fall below them wait for a checkpoint.
const hardRetainFactor = 4

// trimLocked drops the oldest blocks while more than retain records are
// kept and the block lies below the newest checkpoint's end (or more than
// hardRetainFactor × retain are kept). The floor becomes the highest end
// among dropped records, so no dropped record decides an offset at or
// above it.
func (cm *commitMap) trimLocked() {
	for len(cm.mu.blocks) > 1 && cm.mu.count-len(cm.mu.blocks[0]) >= cm.retain {
		end := cm.mu.floor
		for _, r := range cm.mu.blocks[0] {
			end = max(end, r.Range.End)
		}
		if end > cm.mu.checkpointEnd && cm.mu.count-len(cm.mu.blocks[0]) < hardRetainFactor*cm.retain {
			return
		}
		cm.mu.floor = end
		cm.mu.count -= len(cm.mu.blocks[0])
		cm.mu.blocks[0] = nil
		cm.mu.blocks = cm.mu.blocks[1:]
	}
}

// checkpointed records a new checkpoint's end: the records below it may
// be trimmed now.
func (cm *commitMap) checkpointed(end uint64) {
	cm.mu.Lock()
	defer cm.mu.Unlock()
	cm.mu.checkpointEnd = max(cm.mu.checkpointEnd, end)
	cm.trimLocked()
}

// trimmedPastCheckpoint says whether the map dropped records the newest
// checkpoint does not cover: readers below the floor wait for the next
// checkpoint.
func (cm *commitMap) trimmedPastCheckpoint() bool {
	cm.mu.Lock()
	defer cm.mu.Unlock()
	return cm.mu.floor > cm.mu.checkpointEnd
}

// retained is the number of records kept, for metrics.
func (cm *commitMap) retained() int {
	cm.mu.Lock()
	defer cm.mu.Unlock()
	return cm.mu.count
}

// subscribe returns the retained records deciding offsets ≥ from, the
// latest watermark, and a subscriber for what follows.
func (cm *commitMap) subscribe(from uint64) (*subscriber, []EpochRecord, error) {
	cm.mu.Lock()
	defer cm.mu.Unlock()
	if cm.mu.closed {
		return nil, nil, ErrNotLeader
	}
	if from < cm.mu.floor {
		return nil, nil, ErrBelowRetention
	}
	var snap []EpochRecord
	for _, b := range cm.mu.blocks {
		for _, r := range b {
			if r.Range.End > from {
				snap = append(snap, r)
			}
		}
	}
	snap = append(snap, cm.mu.published)
	s := &subscriber{from: from, ch: make(chan []EpochRecord, 256)}
	cm.mu.subs[s] = struct{}{}
	return s, snap, nil
}

func (cm *commitMap) unsubscribe(s *subscriber) {
	cm.mu.Lock()
	defer cm.mu.Unlock()
	if _, ok := cm.mu.subs[s]; ok {
		delete(cm.mu.subs, s)
		close(s.ch)
	}
}

// close ends every subscription (the leader stepped down).
func (cm *commitMap) close() {
	cm.mu.Lock()
	defer cm.mu.Unlock()
	cm.mu.closed = true
	for s := range cm.mu.subs {
		delete(cm.mu.subs, s)
		close(s.ch)
	}
}
