package sequencer

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// leader is the thin I/O loop around one epoch's Machine: it feeds the
// machine under mu and carries out each Ready without blocking on the
// network (grant replies go to per-stream outboxes, etcd and ledger work to
// goroutines that feed their results back).
type leader struct {
	node   *Node
	epoch  uint64
	store  *epochStore
	ctl    LedgerControl
	commit CommitLog
	cm     *commitMap
	// electionKey and the commit ledger list (with its etcd revision) are
	// what a roll (leader_roll.go) creates and records the next commit
	// ledger with, and what a checkpoint truncates (checkpoint.go):
	// listMu guards list, listRev and ckpt.
	electionKey string
	listMu      sync.Mutex
	list        commitLedgerList
	listRev     int64
	ckpt        checkpointTrack
	// ckptLedgers writes checkpoints; nil when Ledgers cannot (none are
	// written then).
	ckptLedgers CheckpointLedgers
	ctx         context.Context
	cancel      context.CancelFunc

	lac     atomic.Int64 // the commit ledger's LAC, from OnConfirm
	confirm chan struct{}
	wg      sync.WaitGroup

	mu struct {
		sync.Mutex
		m       *Machine
		streams map[SessionID]*grantStream
		byInc   map[string]*grantStream
		pending []pendingCommit // appended commit entries not yet confirmed
		unsent  []Record        // records waiting for an append slot (group commit)
		deposed bool
		// rolling is set while the commit ledger is being replaced: no
		// entry is appended meanwhile. rollWanted asks for a roll of a
		// degraded commit ledger (leader_roll.go), checkingStores is set
		// while the stores are counted, storesChecked is when they were.
		rolling        bool
		rollWanted     error
		checkingStores bool
		storesChecked  time.Time
		// deposedBy says why the leader stepped down, if it did so itself.
		deposedBy string
		// lastAppend is when the last commit entry was appended; flushArmed
		// is set while a timer will flush the unsent records.
		lastAppend time.Time
		flushArmed bool
		// checkpointing is set from the moment a checkpoint is due until
		// it ends; checkpointAwaitsRoll until the roll it asked for is
		// done. recordsSince counts the records confirmed since the last
		// checkpoint started (a new leader starts it at the records its
		// takeover replayed), lastCheckpoint is when it did.
		checkpointing        bool
		checkpointAwaitsRoll bool
		recordsSince         int
		lastCheckpoint       time.Time
		// checkpointFloor is the floor (log start) when the last
		// checkpoint started: a checkpoint is due sooner once it moved.
		checkpointFloor uint64
	}
}

type pendingCommit struct {
	entry   int64
	maxSeq  uint64
	records []EpochRecord
}

func (l *leader) now() time.Duration { return time.Since(l.node.start) }

// onConfirm is the commit ledger's OnConfirm callback; it must not block.
func (l *leader) onConfirm(lac int64) {
	l.lac.Store(lac)
	select {
	case l.confirm <- struct{}{}:
	default:
	}
}

// run ticks the machine and applies commit confirmations until the
// leader's context ends.
func (l *leader) run() {
	l.wg.Add(1)
	go l.watchIngests()
	tick := time.NewTicker(l.node.cfg.TickInterval)
	defer tick.Stop()
	for {
		select {
		case <-l.ctx.Done():
			return
		case <-tick.C:
			l.mu.Lock()
			if !l.mu.rolling && l.commit.Err() != nil {
				// The commit ledger failed while an entry waited for its
				// confirmation, so no Append reports it: C would stand
				// still for good. Step down; the next term starts a new
				// commit ledger.
				l.deposeLocked(fmt.Sprintf("commit ledger %d failed: %v", l.commit.ID(), l.commit.Err()))
				l.mu.Unlock()
				return
			}
			l.mu.m.Tick(l.now())
			l.handleLocked()
			l.maybeCheckpointLocked()
			l.maybeRollLocked()
			l.checkEnsembleLocked()
			l.mu.Unlock()
		case <-l.confirm:
			l.applyConfirmed(l.lac.Load())
		}
	}
}

func (l *leader) applyConfirmed(lac int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	i := 0
	var maxSeq uint64
	for ; i < len(l.mu.pending) && l.mu.pending[i].entry <= lac; i++ {
		l.cm.add(l.mu.pending[i].records)
		l.mu.recordsSince += len(l.mu.pending[i].records)
		maxSeq = l.mu.pending[i].maxSeq
	}
	if i == 0 {
		return
	}
	l.mu.pending = l.mu.pending[i:]
	l.mu.m.Confirmed(maxSeq)
	l.maybeRollLocked() // before the next append fills pending again
	l.handleLocked()
	l.flushCommitsLocked()
}

// maxCommitsInFlight bounds the commit entries appended but not confirmed;
// records produced meanwhile wait and go out together in the next entry
// (group commit: under load entries grow instead of multiplying).
const maxCommitsInFlight = 1

func (l *leader) flushCommitsLocked() {
	if len(l.mu.unsent) == 0 || len(l.mu.pending) >= maxCommitsInFlight || l.mu.deposed || l.mu.rolling {
		return
	}
	if wait := commitInterval - time.Since(l.mu.lastAppend); wait > 0 && len(l.mu.unsent) < commitEntryRecords {
		if !l.mu.flushArmed {
			l.mu.flushArmed = true
			time.AfterFunc(wait, func() {
				l.mu.Lock()
				defer l.mu.Unlock()
				l.mu.flushArmed = false
				l.flushCommitsLocked()
			})
		}
		return
	}
	l.mu.lastAppend = time.Now()
	l.appendLocked(l.mu.unsent)
	l.mu.unsent = l.mu.unsent[:0]
}

// Commit entries follow each other at least commitInterval apart unless
// commitEntryRecords records wait: under sustained load each entry then
// carries a millisecond of decisions, and the commit log's appends, store
// round trips and confirmations stop competing with grants for the CPUs
// (1-stream grants/s +13 % in bench/sequencer). A record arriving after a
// quiet millisecond goes out at once, so only a busy log's C waits, by at
// most commitInterval; acknowledgements never wait for C.
const (
	commitInterval     = time.Millisecond
	commitEntryRecords = 4096
)

// handleLocked carries out the machine's Ready.
func (l *leader) handleLocked() {
	rd := l.mu.m.Ready()
	if rd.Empty() {
		return
	}
	// Queue each session's run of consecutive replies at once; the stream
	// builds the protobuf frames outside this lock.
	for i := 0; i < len(rd.Grants); {
		j := i + 1
		for j < len(rd.Grants) && rd.Grants[j].Session == rd.Grants[i].Session {
			j++
		}
		if s := l.mu.streams[rd.Grants[i].Session]; s != nil {
			s.queueGrants(rd.Grants[i:j])
		}
		i = j
	}
	if len(rd.Records) > 0 && !l.mu.deposed {
		l.mu.unsent = append(l.mu.unsent, rd.Records...)
		l.flushCommitsLocked()
	}
	for _, c := range rd.Closes {
		s := l.mu.streams[c.Session]
		if s == nil {
			s = l.mu.byInc[c.Writer]
		}
		if s != nil {
			s.queueClose(c.Ledger)
		}
	}
	for _, id := range rd.Recovers {
		l.goRecover(id)
	}
	if rd.Reserve != nil {
		l.goReserve(*rd.Reserve)
	}
	for _, id := range rd.EndSessions {
		if s := l.mu.streams[id]; s != nil {
			s.end()
		}
	}
	for _, v := range rd.Violations {
		l.node.cfg.Logger.Error("sequencer protocol violation", "epoch", l.epoch, "err", v)
	}
}

func (l *leader) appendLocked(records []Record) {
	payload := EncodeCommitEntry(make([]byte, 0, 16+len(records)*12), l.epoch, records)
	entry, err := l.commit.Append(payload)
	if err != nil {
		// Fenced (a newer leader recovered the commit ledger) or quorum
		// lost: this leader can commit nothing more.
		l.deposeLocked(fmt.Sprintf("commit ledger %d append: %v", l.commit.ID(), err))
		return
	}
	tagged := make([]EpochRecord, len(records))
	for i, r := range records {
		tagged[i] = EpochRecord{Epoch: l.epoch, Record: r}
	}
	l.mu.pending = append(l.mu.pending, pendingCommit{entry: entry, maxSeq: records[len(records)-1].Seq, records: tagged})
}

// deposeLocked ends the term; reason says why ("" when it ends from
// outside: the node stops, the session expired).
func (l *leader) deposeLocked(reason string) {
	if l.mu.deposed {
		return
	}
	l.mu.deposed, l.mu.deposedBy = true, reason
	l.mu.m.Deposed()
	l.cancel()
}

// endReason says why the term ended, once it has.
func (l *leader) endReason(nodeCtx context.Context, sess *electionSession) string {
	l.mu.Lock()
	reason := l.mu.deposedBy
	l.mu.Unlock()
	switch {
	case reason != "":
		return reason
	case nodeCtx.Err() != nil: // the session ends with the node's context too
		return "node stopping"
	}
	select {
	case <-sess.Done():
		return "etcd election session expired"
	default:
	}
	return "deposed"
}

// shutdown ends every stream and subscription and waits for the helpers.
func (l *leader) shutdown() {
	l.cancel()
	l.mu.Lock()
	l.deposeLocked("")
	for _, s := range l.mu.streams {
		s.end()
	}
	l.mu.Unlock()
	l.cm.close()
	l.wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	l.commit.Close(ctx)
}
