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
	if !c.prefixOfLocked(ledgers) {
		return CommitMap{}, 0 // another list (once issue 16's checkpoints truncate it): fold afresh
	}
	cm := c.folded
	cm.Records = slices.Clone(cm.Records)
	return cm, len(c.ledgers)
}

// prefixOfLocked says whether the cached ledgers start ledgers.
func (c *replayCache) prefixOfLocked(ledgers []uint64) bool { return isPrefix(c.ledgers, ledgers) }

// covers says whether the cache holds the replay of ledgers already (or
// of a longer list that starts with them: a takeover that failed after
// its replay kept the previous leader's last ledger too).
func (c *replayCache) covers(ledgers []uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return isPrefix(ledgers, c.ledgers)
}

// keep records cm as the replay of ledgers (which must all be closed),
// unless the cache covers them already. It keeps cm itself: the caller
// must not change it afterwards.
func (c *replayCache) keep(ledgers []uint64, cm CommitMap) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if isPrefix(ledgers, c.ledgers) {
		return
	}
	c.ledgers, c.folded = slices.Clone(ledgers), cm
}

// isPrefix says whether list starts with prefix.
func isPrefix(prefix, list []uint64) bool {
	return len(prefix) <= len(list) && slices.Equal(prefix, list[:len(prefix)])
}

// replayCommitLog replays the commit ledgers of list, older first, from
// the cached prefix on; read reads one ledger's entry payloads. It
// returns the replay of the ledgers it could fold — all of them unless
// err says which one it could not read — how many those are, and how many
// entries it read.
func (c *replayCache) replayCommitLog(ctx context.Context, ledgers []uint64, read func(context.Context, uint64) ([][]byte, error)) (cm CommitMap, folded, entries int, err error) {
	cm, folded = c.start(ledgers)
	for _, id := range ledgers[folded:] {
		p, err := read(ctx, id)
		if err != nil {
			return cm, folded, entries, fmt.Errorf("commit ledger %d: %w", id, err)
		}
		if err := cm.replay(p); err != nil { // cm unchanged: the ledgers before it stay folded
			return cm, folded, entries, fmt.Errorf("commit ledger %d: %w", id, err)
		}
		folded, entries = folded+1, entries+len(p)
	}
	return cm, folded, entries, nil
}

// warmEvery is how often a standby looks for newly closed commit ledgers.
const warmEvery = 2 * time.Second

// warmReplays extends the cache with the closed commit ledgers (all of
// the list but its last) every warmEvery until ctx ends, so that a
// takeover reads only what the previous leader wrote last. What it could
// fold before a ledger it cannot read is kept; that ledger is tried again
// on the next round (a failure is logged when it first appears).
func (n *Node) warmReplays(ctx context.Context) {
	t := time.NewTicker(warmEvery)
	defer t.Stop()
	store := &epochStore{cli: n.cfg.Etcd}
	failing := ""
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if n.leader() != nil || n.takingOverEpoch() != 0 {
			continue // its own takeover reads the log and fills the cache
		}
		list, _, err := store.commitLedgers(ctx)
		if err != nil || len(list.Ledgers) < 2 {
			continue
		}
		closed := list.ids()[:len(list.Ledgers)-1]
		if n.replays.covers(closed) {
			continue
		}
		cm, folded, _, err := n.replays.replayCommitLog(ctx, closed, n.cfg.Ledgers.ReadClosedCommitLog)
		n.replays.keep(closed[:folded], cm)
		switch {
		case err == nil:
			failing = ""
		case err.Error() != failing && ctx.Err() == nil:
			failing = err.Error()
			n.cfg.Logger.Info("sequencer: a standby could not replay a closed commit ledger ahead of a takeover; retrying",
				"err", err)
		}
	}
}
