package sequencer

import "time"

// SessionID names one grant stream; the I/O loop assigns them, never reusing one.
type SessionID uint64

// session is one Grant stream of an ingest incarnation.
type session struct {
	id          SessionID
	incarnation string
	leaseID     int64
	lastHeard   time.Duration
	ended       bool
	// gone: the incarnation's ingest key was seen deleted (set when the
	// session opens or when IncarnationGone ends it).
	gone bool
}

// SessionOpened registers a grant stream after its Hello. A newer stream of
// the same incarnation ends the older one; the incarnation's ledgers stay
// with the new stream.
func (m *Machine) SessionOpened(now time.Duration, id SessionID, incarnation string, leaseID int64) {
	m.Tick(now)
	if old, ok := m.current[incarnation]; ok {
		if s := m.sessions[old]; s != nil && !s.ended {
			s.ended = true
			m.out.EndSessions = append(m.out.EndSessions, old)
		}
		delete(m.sessions, old)
	}
	m.sessions[id] = &session{id: id, incarnation: incarnation, leaseID: leaseID, lastHeard: now, gone: m.gone[incarnation]}
	m.current[incarnation] = id
}

// SessionClosed reports that a grant stream ended. If it was its
// incarnation's current stream, that incarnation's open ledgers are closed.
func (m *Machine) SessionClosed(now time.Duration, id SessionID) {
	m.Tick(now)
	s := m.sessions[id]
	if s == nil {
		return
	}
	m.endSession(s)
}

// Heard records that some frame (grant request, report or heartbeat)
// arrived on a stream.
func (m *Machine) Heard(now time.Duration, id SessionID) {
	if now > m.now {
		m.now = now
	}
	if s := m.sessions[id]; s != nil && !s.ended && now > s.lastHeard {
		s.lastHeard = now
	}
}

// IncarnationGone reports that ingest/<incarnation> was deleted (its etcd
// lease expired or was revoked): its session dies and its ledgers close.
func (m *Machine) IncarnationGone(now time.Duration, incarnation string) {
	m.Tick(now)
	m.gone[incarnation] = true
	if id, ok := m.current[incarnation]; ok {
		if s := m.sessions[id]; s != nil {
			s.gone = true
			m.endSession(s)
			m.out.EndSessions = append(m.out.EndSessions, id)
		}
	}
	m.closeLedgersOf(incarnation)
}

func (m *Machine) endSession(s *session) {
	delete(m.sessions, s.id)
	if m.current[s.incarnation] != s.id {
		return
	}
	delete(m.current, s.incarnation)
	s.ended = true
	m.closeLedgersOf(s.incarnation)
}

// alive is the §5 session rule: stream open, heard within the timeout, the
// current stream of its incarnation, ingest key not seen deleted.
func (m *Machine) alive(id SessionID) bool { return m.sessionAlive(m.sessions[id]) }

// sessionAlive is alive for a looked-up session (nil: unknown). Invariant:
// m.sessions holds only current streams (SessionOpened removes the one a
// newer stream supersedes, endSession removes ended ones), so being found
// there is being current. That saves two string-keyed lookups on the path
// of every grant; the randomized schedules check the invariant.
func (m *Machine) sessionAlive(s *session) bool {
	return s != nil && !s.ended && !s.gone && m.now-s.lastHeard <= m.cfg.SessionTimeout
}

func (m *Machine) expireSessions() {
	for id, s := range m.sessions {
		if m.now-s.lastHeard > m.cfg.SessionTimeout {
			m.endSession(s)
			m.out.EndSessions = append(m.out.EndSessions, id)
		}
	}
}

func (m *Machine) closeLedgersOf(incarnation string) {
	for _, l := range m.ledgers {
		if l.Writer == incarnation && l.state == ledgerOpen {
			m.startClose(l)
		}
	}
}
