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
		records   []EpochRecord // Written and Hole only
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
	cm.mu.records = append([]EpochRecord(nil), replayed...)
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
		cm.mu.records = append(cm.mu.records, r)
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

// trimLocked drops the oldest half once more than retain records are kept.
// The floor becomes the highest end among dropped records, so no dropped
// record decides an offset at or above it.
func (cm *commitMap) trimLocked() {
	if len(cm.mu.records) <= cm.retain {
		return
	}
	drop := len(cm.mu.records) - cm.retain/2
	for _, r := range cm.mu.records[:drop] {
		cm.mu.floor = max(cm.mu.floor, r.Range.End)
	}
	cm.mu.records = append([]EpochRecord(nil), cm.mu.records[drop:]...)
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
	for _, r := range cm.mu.records {
		if r.Range.End > from {
			snap = append(snap, r)
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
