package sequencer

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Rolling the commit ledger within a term (DESIGN §4). A commit ledger
// that lost an ensemble member for good (its store came back wiped, as a
// new incarnation, or lagged beyond what the writer retains) still takes
// entries at the ack quorum, but with one copy fewer: after the next fault
// its recovery could have to wait for the one store that holds its tail.
// The leader closes it at its LAC and goes on in a new commit ledger of the
// same epoch, appended to seq/commit-ledgers, instead of writing to it
// until the next fault.

// A degraded commit ledger (created on fewer stores than W, while a store
// was down) is rolled too, once enough stores are registered for a full
// ensemble: with W = A stores every entry has no copy to spare, and after
// the next fault its recovery would wait for the failed store.

// rollTimeout bounds one roll; a roll that cannot finish ends the term.
const rollTimeout = 10 * time.Second

// ensembleCheckEvery is how often a leader reads the store registrations
// to see whether its commit ledger needs rolling (LedgerControl.Weakness):
// an idle one learns of a lost member from no append.
const ensembleCheckEvery = time.Second

// checkEnsembleLocked asks, at most every ensembleCheckEvery, whether the
// commit ledger is weak, and asks for a roll if it is.
func (l *leader) checkEnsembleLocked() {
	if l.mu.rolling || l.mu.rollWanted != nil || l.mu.checkingStores ||
		time.Since(l.mu.storesChecked) < ensembleCheckEvery {
		return
	}
	l.mu.checkingStores, l.mu.storesChecked = true, time.Now()
	commit := l.commit
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		ctx, cancel := context.WithTimeout(l.ctx, ensembleCheckEvery)
		reason, err := l.ctl.Weakness(ctx, commit)
		cancel()
		l.mu.Lock()
		defer l.mu.Unlock()
		l.mu.checkingStores = false
		if err == nil && reason != "" && l.commit == commit {
			l.mu.rollWanted = errors.New(reason)
			l.maybeRollLocked()
		}
	}()
}

// maybeRollLocked starts a roll when the commit ledger lost a member and no
// entry waits for its confirmation (a closed ledger's entries are exactly
// its confirmed ones, so nothing appended is left behind). Records decided
// meanwhile wait in unsent and go into the new ledger.
func (l *leader) maybeRollLocked() {
	if l.mu.rolling || l.mu.deposed || len(l.mu.pending) > 0 {
		return
	}
	lost := l.commit.LostMember()
	if lost == nil {
		lost = l.mu.rollWanted
	}
	if lost == nil {
		return
	}
	l.mu.rolling, l.mu.rollWanted = true, nil
	old := l.commit
	l.wg.Add(1)
	go l.roll(old, lost)
}

// roll replaces old with a new commit ledger, or ends the term.
func (l *leader) roll(old CommitLog, lost error) {
	defer l.wg.Done()
	start := time.Now()
	next, err := l.replaceCommitLog(old)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.deposeLocked(fmt.Sprintf("roll commit ledger %d: %v", old.ID(), err))
		return
	}
	l.commit = next
	l.mu.rolling = false
	l.node.cfg.Logger.Info("sequencer: commit ledger rolled", "epoch", l.epoch, "closed", old.ID(), "opened", next.ID(),
		"reason", lost.Error(), "took", time.Since(start))
	l.startCheckpointLocked(next.ID())
	l.flushCommitsLocked()
}

// replaceCommitLog closes old at its LAC, creates the next commit ledger of
// the epoch and records it in seq/commit-ledgers (compared against the
// list's revision and the epoch: a newer leader's list is never touched).
func (l *leader) replaceCommitLog(old CommitLog) (CommitLog, error) {
	ctx, cancel := context.WithTimeout(l.ctx, rollTimeout)
	defer cancel()
	if err := old.Close(ctx); err != nil {
		return nil, fmt.Errorf("close: %w", err)
	}
	// Close reported the old ledger's last confirmation before returning;
	// the new ledger's entries count from 0 again.
	l.lac.Store(-1)
	next, err := l.ctl.CreateCommitLog(ctx, l.epoch, l.electionKey, l.onConfirm)
	if err != nil {
		return nil, err
	}
	l.listMu.Lock()
	defer l.listMu.Unlock()
	list, rev, err := l.store.addCommitLedger(ctx, l.list, l.listRev, next.ID())
	if err != nil {
		_ = next.Close(ctx)
		return nil, err
	}
	l.list, l.listRev = list, rev
	return next, nil
}
