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
	mu sync.Mutex
	// base is the checkpoint ledger the fold starts from (0: the log's
	// start); ledgers are the commit ledgers folded on top, in list order.
	base    uint64
	ledgers []uint64
	folded  CommitMap // their replay
}

// replayBase is where a replay starts: a checkpoint (its ledger and a way
// to read its state) or, zero, the log's start.
type replayBase struct {
	ledger uint64
	state  func(context.Context) (*CheckpointState, error)
}

// start returns the cached replay of the longest prefix of ledgers it
// holds (a copy the caller may extend) and the prefix's length.
func (c *replayCache) start(ledgers []uint64) (CommitMap, int) { return c.startFrom(0, ledgers) }

// startFrom is start for a replay on top of checkpoint ledger base; a
// cache of another base holds nothing for it.
func (c *replayCache) startFrom(base uint64, ledgers []uint64) (CommitMap, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.base != base || !c.prefixOfLocked(ledgers) {
		return CommitMap{}, 0 // another list or checkpoint: fold afresh
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
func (c *replayCache) covers(ledgers []uint64) bool { return c.coversFrom(0, ledgers) }

func (c *replayCache) coversFrom(base uint64, ledgers []uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.base == base && isPrefix(ledgers, c.ledgers)
}

// keep records cm as the replay of ledgers (which must all be closed),
// unless the cache covers them already. It keeps cm itself: the caller
// must not change it afterwards.
func (c *replayCache) keep(ledgers []uint64, cm CommitMap) { c.keepFrom(0, ledgers, cm) }

func (c *replayCache) keepFrom(base uint64, ledgers []uint64, cm CommitMap) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.base == base && isPrefix(ledgers, c.ledgers) {
		return
	}
	c.base, c.ledgers, c.folded = base, slices.Clone(ledgers), cm
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
	return c.replayFrom(ctx, replayBase{}, ledgers, read)
}

// replayFrom is replayCommitLog on top of a checkpoint: without a cached
// prefix it starts from the checkpoint's state.
func (c *replayCache) replayFrom(ctx context.Context, base replayBase, ledgers []uint64, read func(context.Context, uint64) ([][]byte, error)) (cm CommitMap, folded, entries int, err error) {
	cm, folded = c.startFrom(base.ledger, ledgers)
	if folded == 0 && base.ledger != 0 {
		st, err := base.state(ctx)
		if err != nil {
			return CommitMap{}, 0, 0, err
		}
		cm = fromState(st)
	}
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

// warmReplays extends the cache with the closed commit ledgers after the
// newest checkpoint (all of the list from its FirstKept on but the last)
// every warmEvery until ctx ends, so that a takeover reads only what the
// previous leader wrote last. What it could fold before a ledger it cannot
// read is kept; that ledger is tried again on the next round (a failure is
// logged when it first appears).
func (n *Node) warmReplays(ctx context.Context) {
	t := time.NewTicker(warmEvery)
	defer t.Stop()
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
		err := n.warmOnce(ctx)
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

// warmOnce is one round of warmReplays.
func (n *Node) warmOnce(ctx context.Context) error {
	head, err := readHead(ctx, n.cfg.Etcd)
	if err != nil {
		return err
	}
	kept, err := head.kept()
	if err != nil || len(kept.Ledgers) < 2 {
		return err
	}
	closed := kept.ids()[:len(kept.Ledgers)-1]
	base := n.replayBase(head.pointer)
	if n.replays.coversFrom(base.ledger, closed) {
		return nil
	}
	cm, folded, _, err := n.replays.replayFrom(ctx, base, closed, n.cfg.Ledgers.ReadClosedCommitLog)
	if folded > 0 || base.ledger == 0 {
		n.replays.keepFrom(base.ledger, closed[:folded], cm)
	}
	return err
}

// replayBase is where a replay of the log p points at starts.
func (n *Node) replayBase(p CheckpointPointer) replayBase {
	if p.IsZero() {
		return replayBase{}
	}
	return replayBase{ledger: p.Ledger, state: func(ctx context.Context) (*CheckpointState, error) {
		ckpt, ok := n.cfg.Ledgers.(CheckpointLedgers)
		if !ok { // the list alone is not the log any more
			return nil, fmt.Errorf("sequencer: checkpoint %d cannot be read: Ledgers does not implement CheckpointLedgers", p.Ledger)
		}
		return readCheckpointState(ctx, ckpt, p)
	}}
}
