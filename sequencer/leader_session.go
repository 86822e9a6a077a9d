package sequencer

import (
	"time"

	pb "orderlog/proto/sequencerpb"
)

// Grant streams as the leader sees them: sessions and their frames.

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
		l.goClosedByWriter(s, c.LedgerId)
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
