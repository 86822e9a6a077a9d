package node

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"orderlog/internal/keys"
)

// A node cut off from the etcd quorum (a partition, its member isolated)
// keeps its registration until its lease is found lost, two TTLs or more,
// and its producers' frames wait meanwhile: it answered their stall probes
// SERVING. quorumWatch notices sooner: a linearizable read needs the
// quorum, and one that has failed for quorumLostAfter while the node also
// has no grant stream makes the Producer health status NOT_SERVING, so
// clients move their producers to a node that can log them. Both are
// asked for: while etcd merely elects a raft leader every node loses the
// quorum for a second or two, and a node whose leader still grants keeps
// its producers. A node whose own sequencer leads asks only for the
// quorum: its in-process stream stays up while it is cut off.
const (
	quorumAskEvery  = 250 * time.Millisecond
	quorumAskFor    = 500 * time.Millisecond
	quorumLostAfter = time.Second
)

// quorumWatch remembers when a linearizable etcd read last succeeded.
type quorumWatch struct {
	lastOK atomic.Int64 // unix nanoseconds
}

// run reads keys.SeqEpoch every quorumAskEvery until ctx ends (the
// caller stores the start as the first lastOK).
func (q *quorumWatch) run(ctx context.Context, cli *clientv3.Client) {
	t := time.NewTicker(quorumAskEvery)
	defer t.Stop()
	for {
		actx, cancel := context.WithTimeout(ctx, quorumAskFor)
		_, err := cli.Get(actx, keys.SeqEpoch)
		cancel()
		if err == nil {
			q.lastOK.Store(time.Now().UnixNano())
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// lost returns an error when no read has reached the quorum for
// quorumLostAfter.
func (q *quorumWatch) lost(now time.Time) error {
	since := now.Sub(time.Unix(0, q.lastOK.Load()))
	if since < quorumLostAfter {
		return nil
	}
	return fmt.Errorf("ingest: no etcd quorum for %v", since.Round(100*time.Millisecond))
}

// doubted says whether no read has reached the quorum for
// quorumDoubtAfter: what this node tells its peers (peers.go).
func (q *quorumWatch) doubted(now time.Time) bool {
	return now.Sub(time.Unix(0, q.lastOK.Load())) >= quorumDoubtAfter
}

// lastOKAt is when a read last reached the quorum.
func (q *quorumWatch) lastOKAt() time.Time { return time.Unix(0, q.lastOK.Load()) }
