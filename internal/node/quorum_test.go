package node

import (
	"testing"
	"time"
)

func TestQuorumWatchSaysLostOnlyAfterQuorumLostAfter(t *testing.T) {
	var q quorumWatch
	t0 := time.Unix(1000, 0)
	q.lastOK.Store(t0.UnixNano())
	if err := q.lost(t0.Add(quorumLostAfter - time.Millisecond)); err != nil {
		t.Fatalf("lost before quorumLostAfter: %v", err)
	}
	if err := q.lost(t0.Add(quorumLostAfter)); err == nil {
		t.Fatal("not lost after quorumLostAfter without a read")
	}
}

func TestQuorumWatchDoubtsBeforeItSaysLost(t *testing.T) {
	var q quorumWatch
	t0 := time.Unix(1000, 0)
	q.lastOK.Store(t0.UnixNano())
	if q.doubted(t0.Add(quorumDoubtAfter - time.Millisecond)) {
		t.Fatal("doubted before quorumDoubtAfter")
	}
	at := t0.Add(quorumDoubtAfter)
	if !q.doubted(at) || q.lost(at) != nil {
		t.Fatal("peers must hear of a doubt before this node finds the quorum lost")
	}
}
