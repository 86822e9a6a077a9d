package sequencer

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"orderlog/internal/keys"
	pb "orderlog/proto/sequencerpb"
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
	ctx    context.Context
	cancel context.CancelFunc

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
			l.mu.m.Tick(l.now())
			l.handleLocked()
			l.mu.Unlock()
		case <-l.confirm:
			l.applyConfirmed(l.lac.Load())
		}
	}
}

// watchIngests feeds IncarnationGone when an ingest liveness key is
// deleted (its node's etcd lease expired or was revoked): §5's third
// condition of a live session.
func (l *leader) watchIngests() {
	defer l.wg.Done()
	wch := l.node.cfg.Etcd.Watch(clientv3.WithRequireLeader(l.ctx), keys.IngestPrefix, clientv3.WithPrefix())
	for resp := range wch {
		for _, ev := range resp.Events {
			if ev.Type != clientv3.EventTypeDelete {
				continue
			}
			inc := strings.TrimPrefix(string(ev.Kv.Key), keys.IngestPrefix)
			l.mu.Lock()
			l.mu.m.IncarnationGone(l.now(), inc)
			l.handleLocked()
			l.mu.Unlock()
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
		maxSeq = l.mu.pending[i].maxSeq
	}
	if i == 0 {
		return
	}
	l.mu.pending = l.mu.pending[i:]
	l.mu.m.Confirmed(maxSeq)
	l.handleLocked()
	l.flushCommitsLocked()
}

// maxCommitsInFlight bounds the commit entries appended but not confirmed;
// records produced meanwhile wait and go out together in the next entry
// (group commit: under load entries grow instead of multiplying).
const maxCommitsInFlight = 1

func (l *leader) flushCommitsLocked() {
	if len(l.mu.unsent) == 0 || len(l.mu.pending) >= maxCommitsInFlight || l.mu.deposed {
		return
	}
	l.appendLocked(l.mu.unsent)
	l.mu.unsent = l.mu.unsent[:0]
}

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
		l.node.logf("sequencer epoch %d: %v", l.epoch, v)
	}
}

func (l *leader) appendLocked(records []Record) {
	payload := EncodeCommitEntry(make([]byte, 0, 16+len(records)*12), l.epoch, records)
	entry, err := l.commit.Append(payload)
	if err != nil {
		// Fenced (a newer leader recovered the commit ledger) or quorum
		// lost: this leader can commit nothing more.
		l.node.logf("sequencer epoch %d: commit append: %v", l.epoch, err)
		l.deposeLocked()
		return
	}
	tagged := make([]EpochRecord, len(records))
	for i, r := range records {
		tagged[i] = EpochRecord{Epoch: l.epoch, Record: r}
	}
	l.mu.pending = append(l.mu.pending, pendingCommit{entry: entry, maxSeq: records[len(records)-1].Seq, records: tagged})
}

func (l *leader) deposeLocked() {
	if l.mu.deposed {
		return
	}
	l.mu.deposed = true
	l.mu.m.Deposed()
	l.cancel()
}

// goRecover recovers a ledger through the ledger client, retrying until it
// succeeds or the leader steps down, then feeds LedgerClosed.
func (l *leader) goRecover(id uint64) {
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		for l.ctx.Err() == nil {
			spans, err := l.ctl.Recover(l.ctx, id)
			if err == nil {
				l.ledgerClosed(id, spans)
				return
			}
			l.node.logf("sequencer epoch %d: recover ledger %d: %v", l.epoch, id, err)
			select {
			case <-l.ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
}

// goClosedByWriter reads the spans of a ledger its writer says it closed.
func (l *leader) goClosedByWriter(id uint64) {
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		spans, err := l.ctl.ClosedSpans(l.ctx, id)
		if err != nil {
			return // the close timeout's recovery settles it
		}
		l.ledgerClosed(id, spans)
	}()
}

func (l *leader) ledgerClosed(id uint64, spans []EntrySpan) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.mu.m.LedgerClosed(l.now(), id, spans)
	l.handleLocked()
}

func (l *leader) goReserve(r Reservation) {
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		err := l.store.extend(l.ctx, r.Expect, r.New)
		l.mu.Lock()
		defer l.mu.Unlock()
		switch {
		case err == nil:
			l.mu.m.ReservationExtended(r.New)
		case errors.Is(err, ErrDeposed):
			l.deposeLocked()
		default:
			l.mu.m.ReservationFailed()
		}
		l.handleLocked()
	}()
}

// openSession registers a grant stream.
func (l *leader) openSession(s *grantStream, leaseID int64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mu.deposed {
		return ErrNotLeader
	}
	l.mu.streams[s.id] = s
	l.mu.byInc[s.incarnation] = s
	l.mu.m.SessionOpened(l.now(), s.id, s.incarnation, leaseID)
	l.handleLocked()
	return nil
}

func (l *leader) closeSession(s *grantStream) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.mu.streams, s.id)
	if l.mu.byInc[s.incarnation] == s {
		delete(l.mu.byInc, s.incarnation)
	}
	l.mu.m.SessionClosed(l.now(), s.id)
	l.handleLocked()
}

// onFrame feeds one ingest frame to the machine. Ledgers the machine does
// not know are looked up in etcd first (once each), outside the lock.
func (l *leader) onFrame(s *grantStream, f *pb.IngestFrame) {
	l.mu.Lock()
	if l.unknownLedgerLocked(f.Grants) {
		l.mu.Unlock()
		l.learnLedgers(f.Grants)
		l.mu.Lock()
	}
	now := l.now()
	m := l.mu.m
	m.Heard(now, s.id)
	for _, w := range f.Written {
		m.Written(now, s.id, w.LedgerId, w.EntryId, rangeFromProto(w.Range))
	}
	for _, u := range f.Unused {
		m.Unused(now, s.id, u.LedgerId, rangeFromProto(u.Range))
	}
	for _, g := range f.Grants {
		m.RequestGrant(now, s.id, g.RequestId, g.LedgerId, g.Count)
	}
	l.handleLocked()
	l.mu.Unlock()
	for _, c := range f.Closed {
		l.goClosedByWriter(c.LedgerId)
	}
}

func (l *leader) unknownLedgerLocked(reqs []*pb.GrantRequest) bool {
	for _, g := range reqs {
		if !l.mu.m.KnowsLedger(g.LedgerId) {
			return true
		}
	}
	return false
}

func (l *leader) learnLedgers(reqs []*pb.GrantRequest) {
	var unknown []uint64
	l.mu.Lock()
	for _, g := range reqs {
		if !l.mu.m.KnowsLedger(g.LedgerId) && (len(unknown) == 0 || unknown[len(unknown)-1] != g.LedgerId) {
			unknown = append(unknown, g.LedgerId)
		}
	}
	l.mu.Unlock()
	for _, id := range unknown {
		ref, open, err := l.ctl.Lookup(l.ctx, id)
		if err != nil || !open {
			continue // refused as unknown: the writer opens another ledger
		}
		l.mu.Lock()
		l.mu.m.LedgerOpened(ref)
		l.handleLocked()
		l.mu.Unlock()
	}
}

// shutdown ends every stream and subscription and waits for the helpers.
func (l *leader) shutdown() {
	l.cancel()
	l.mu.Lock()
	l.deposeLocked()
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

// grantToProto fills out (and r, for a grant) from g.
func grantToProto(out *pb.GrantReply, r *pb.Range, g GrantReply, lease time.Duration) *pb.GrantReply {
	out.RequestId, out.LedgerId, out.Status = g.RequestID, g.Ledger, statusToProto(g.Status)
	if g.Status == StatusGranted {
		r.First, r.End = g.Range.First, g.Range.End
		out.Range, out.LeaseMs = r, lease.Milliseconds()
	}
	return out
}

func statusToProto(s GrantStatus) pb.GrantStatus {
	switch s {
	case StatusGranted:
		return pb.GrantStatus_GRANTED
	case StatusNotLeader:
		return pb.GrantStatus_NOT_LEADER
	case StatusSessionDead:
		return pb.GrantStatus_SESSION_DEAD
	case StatusUnknownLedger:
		return pb.GrantStatus_UNKNOWN_LEDGER
	case StatusLedgerNotOpen:
		return pb.GrantStatus_LEDGER_NOT_OPEN
	case StatusWrongWriter:
		return pb.GrantStatus_WRONG_WRITER
	}
	return pb.GrantStatus_BAD_REQUEST
}

func rangeFromProto(r *pb.Range) Range {
	if r == nil {
		return Range{}
	}
	return Range{First: r.First, End: r.End}
}
