package sequencer

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
)

// A new leader replays the commit log before it grants (lead, step 2),
// and the log is every commit ledger of every earlier term: read whole,
// it made each failover slower than the last (seconds after a few hundred
// terms). Every commit ledger but the list's last is closed — the leader
// that appended the next one recovered it first — and a closed ledger
// never changes, so its replay can be kept. replayCache keeps the fold of
// a prefix of the commit-ledger list; a standby extends it while it waits
// (warmReplays), and a takeover reads only the ledgers after it: the
// previous leader's last one, which it must fence and recover anyway.
type replayCache struct {
	mu      sync.Mutex
	ledgers []uint64  // the commit ledgers folded, in list order
	folded  CommitMap // their replay
}

// start returns the cached replay of the longest prefix of ledgers it
// holds (a copy the caller may extend) and the prefix's length.
func (c *replayCache) start(ledgers []uint64) (CommitMap, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(c.ledgers)
	if n > len(ledgers) || !slices.Equal(c.ledgers, ledgers[:n]) {
		return CommitMap{}, 0 // another list (a checkpoint truncated it): fold afresh
	}
	cm := c.folded
	cm.Records = slices.Clone(cm.Records)
	return cm, n
}

// keep records cm as the replay of ledgers (which must all be closed),
// unless the cache already covers as many. It keeps cm itself: the caller
// must not change it afterwards.
func (c *replayCache) keep(ledgers []uint64, cm CommitMap) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(ledgers) <= len(c.ledgers) {
		return
	}
	c.ledgers, c.folded = slices.Clone(ledgers), cm
}

// replayCommitLog replays the commit ledgers of list, older first, from
// the cached prefix on; read reads one ledger's entry payloads. It
// returns the replay and how many entries it read.
func (c *replayCache) replayCommitLog(ctx context.Context, ledgers []uint64, read func(context.Context, uint64) ([][]byte, error)) (CommitMap, int, error) {
	cm, done := c.start(ledgers)
	entries := 0
	for _, id := range ledgers[done:] {
		p, err := read(ctx, id)
		if err != nil {
			return CommitMap{}, 0, fmt.Errorf("commit ledger %d: %w", id, err)
		}
		if err := cm.replay(p); err != nil {
			return CommitMap{}, 0, fmt.Errorf("commit ledger %d: %w", id, err)
		}
		entries += len(p)
	}
	return cm, entries, nil
}

// warmEvery is how often a standby looks for newly closed commit ledgers.
const warmEvery = 2 * time.Second

// warmReplays extends the cache with the closed commit ledgers (all of
// the list but its last) every warmEvery until ctx ends, so that a
// takeover reads only what the previous leader wrote last. A ledger that
// cannot be read now is tried again on the next round.
func (n *Node) warmReplays(ctx context.Context) {
	t := time.NewTicker(warmEvery)
	defer t.Stop()
	store := &epochStore{cli: n.cfg.Etcd}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if n.leader() != nil {
			continue // its takeover brought the cache up to date
		}
		list, _, err := store.commitLedgers(ctx)
		if err != nil || len(list.Ledgers) < 2 {
			continue
		}
		closed := list.ids()[:len(list.Ledgers)-1]
		if cm, _, err := n.replays.replayCommitLog(ctx, closed, n.cfg.Ledgers.ReadClosedCommitLog); err == nil {
			n.replays.keep(closed, cm)
		}
	}
}
