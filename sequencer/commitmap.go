package sequencer

import (
	"errors"
	"sync"
)

// ErrBelowRetention is returned by a commit-map subscription from an offset
// below the oldest retained record; replay the commit ledgers instead.
var ErrBelowRetention = errors.New("sequencer: offset below the retained commit map")

// commitMap keeps the confirmed commit records a leader serves to readers
// and fans out new ones. Invariant: every Written/Hole record deciding an
// offset ≥ floor is retained, in log order.
type commitMap struct {
	retain int
	mu     struct {
		sync.Mutex
		// blocks hold the Written and Hole records in log order, in
		// blocks of blockSize so appending and trimming never copy them.
		blocks    [][]EpochRecord
		count     int
		floor     uint64
		published EpochRecord // the latest Watermark
		subs      map[*subscriber]struct{}
		closed    bool
	}
}

// subscriber receives records in log order; ch is closed when it falls
// behind or the leader steps down.
type subscriber struct {
	from uint64
	ch   chan []EpochRecord
}

func newCommitMap(retain int, replayed []EpochRecord, c0, epoch uint64) *commitMap {
	cm := &commitMap{retain: retain}
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
	if n == 0 || len(cm.mu.blocks[n-1]) == blockSize {
		cm.mu.blocks = append(cm.mu.blocks, make([]EpochRecord, 0, blockSize))
		n++
	}
	cm.mu.blocks[n-1] = append(cm.mu.blocks[n-1], r)
	cm.mu.count++
}

// trimLocked drops the oldest blocks while more than retain records are
// kept. The floor becomes the highest end among dropped records, so no
// dropped record decides an offset at or above it.
func (cm *commitMap) trimLocked() {
	for len(cm.mu.blocks) > 1 && cm.mu.count-len(cm.mu.blocks[0]) >= cm.retain {
		for _, r := range cm.mu.blocks[0] {
			cm.mu.floor = max(cm.mu.floor, r.Range.End)
		}
		cm.mu.count -= len(cm.mu.blocks[0])
		cm.mu.blocks[0] = nil
		cm.mu.blocks = cm.mu.blocks[1:]
	}
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
