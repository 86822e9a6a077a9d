package sequencer

import (
	"errors"
	"testing"
)

func hole(first, end uint64) EpochRecord {
	return EpochRecord{Epoch: 1, Record: Record{Kind: KindHole, Range: Range{first, end}}}
}

// TestCommitMapSubscribeAndTrim: records beyond the retained count go
// only once a checkpoint covers them.
func TestCommitMapSubscribeAndTrim(t *testing.T) {
	cm := newCommitMap(2*blockSize, nil, 0, 1, 0)
	// 3 blocks' worth of one-offset records, confirmed in order.
	for x := uint64(0); x < 3*blockSize; x++ {
		cm.add([]EpochRecord{hole(x, x+1)})
	}
	// No checkpoint covers them: all are kept, so a reader can subscribe
	// from any offset.
	if sub, _, err := cm.subscribe(10); err != nil {
		t.Fatalf("subscribe before a checkpoint: %v", err)
	} else {
		cm.unsubscribe(sub)
	}
	// A checkpoint up to the second block lets the oldest block go: its
	// offsets are below the floor.
	cm.checkpointed(blockSize + 7)
	if _, _, err := cm.subscribe(10); !errors.Is(err, ErrBelowRetention) {
		t.Fatalf("subscribe below the floor: err = %v", err)
	}
	from := uint64(2*blockSize + 5)
	sub, snap, err := cm.subscribe(from)
	if err != nil {
		t.Fatal(err)
	}
	// Every retained record deciding an offset ≥ from, then the watermark.
	if got, want := len(snap), 3*blockSize-int(from)+1; got != want {
		t.Fatalf("snapshot of %d records, want %d", got, want)
	}
	if snap[0].Range.First != from || snap[len(snap)-1].Kind != KindWatermark {
		t.Fatalf("snapshot starts %v, ends %v", snap[0], snap[len(snap)-1])
	}
	// Live records follow, filtered by offset; watermarks always pass.
	cm.add([]EpochRecord{hole(1, 2), hole(3*blockSize, 3*blockSize+1), {Epoch: 1, Record: Record{Kind: KindWatermark, Watermark: 99}}})
	live := <-sub.ch
	if len(live) != 2 || live[0].Range.First != 3*blockSize || live[1].Watermark != 99 {
		t.Fatalf("live records %v", live)
	}
	cm.close()
	if _, ok := <-sub.ch; ok {
		t.Fatal("subscription not ended when the leader stepped down")
	}
}
