package sequencer

import "time"

// GrantStatus is the outcome of one grant request.
type GrantStatus uint8

const (
	// StatusGranted: Range is granted to the ledger.
	StatusGranted GrantStatus = iota + 1
	// StatusNotLeader: this machine does not grant (deposed); retry.
	StatusNotLeader
	// StatusSessionDead: the stream's session is not alive; reconnect.
	StatusSessionDead
	// StatusUnknownLedger: the sequencer does not know the ledger.
	StatusUnknownLedger
	// StatusLedgerNotOpen: the ledger is closing, closed, or of another epoch; open a new one.
	StatusLedgerNotOpen
	// StatusWrongWriter: the ledger's writer is another incarnation.
	StatusWrongWriter
	// StatusBadRequest: the count is 0 or above MaxGrant.
	StatusBadRequest
)

func (s GrantStatus) String() string {
	switch s {
	case StatusGranted:
		return "granted"
	case StatusNotLeader:
		return "not-leader"
	case StatusSessionDead:
		return "session-dead"
	case StatusUnknownLedger:
		return "unknown-ledger"
	case StatusLedgerNotOpen:
		return "ledger-not-open"
	case StatusWrongWriter:
		return "wrong-writer"
	case StatusBadRequest:
		return "bad-request"
	}
	return "status(?)"
}

// GrantReply answers one grant request. Replies to one session leave the
// machine in request order, with increasing offsets.
type GrantReply struct {
	Session   SessionID
	RequestID uint64
	Ledger    uint64
	Status    GrantStatus
	Range     Range // when Status is StatusGranted
	Epoch     uint64
}

type grantRequest struct {
	session   SessionID
	requestID uint64
	ledger    uint64
	count     uint64
}

// LedgerOpened tells the machine about a ledger read from etcd metadata.
// Only open ledgers of the machine's epoch can receive grants.
func (m *Machine) LedgerOpened(ref LedgerRef) {
	if _, ok := m.ledgers[ref.ID]; ok {
		return
	}
	st := ledgerOpen
	if ref.Epoch != m.cfg.Epoch {
		st = ledgerClosed // never grantable here; older ones come through Takeover
	}
	m.ledgers[ref.ID] = &ledgerInfo{LedgerRef: ref, state: st}
	if st == ledgerOpen && (m.gone[ref.Writer] || !m.hasLiveSession(ref.Writer)) {
		// A ledger whose writer is already dead gets no grant and is closed
		// so that nothing granted earlier can linger.
		m.startClose(m.ledgers[ref.ID])
	}
}

func (m *Machine) hasLiveSession(incarnation string) bool {
	id, ok := m.current[incarnation]
	return ok && m.alive(id)
}

// KnowsLedger reports whether LedgerOpened (or Takeover) told the machine
// about ledger id.
func (m *Machine) KnowsLedger(id uint64) bool { _, ok := m.ledgers[id]; return ok }

// RequestGrant queues Grant(count, ledger) from a session. Requests are
// answered in arrival order; a request waits while the reservation is
// being extended, and while the leader takes over.
func (m *Machine) RequestGrant(now time.Duration, id SessionID, requestID, ledgerID, count uint64) {
	m.Heard(now, id)
	req := grantRequest{session: id, requestID: requestID, ledger: ledgerID, count: count}
	switch m.phase {
	case phaseDeposed:
		m.reply(req, StatusNotLeader, Range{})
		return
	case phaseTakeover, phaseReserving:
		// A leader still taking over answers a grant it could give once it
		// grants (drain then): refused, the ingest node would close its
		// ledger and back off (coordinator.RefusalPause) past the moment it
		// could be granted. One it could never give is refused now.
		if st := m.checkRequest(req); st != StatusGranted {
			m.reply(req, st, Range{})
			return
		}
		m.pending = append(m.pending, req)
		return
	}
	if len(m.pending) == 0 && m.grantNow(req) {
		m.maybeReserve()
		return
	}
	m.pending = append(m.pending, req)
	m.drain()
}

// grantNow answers req unless it must wait for the reservation.
func (m *Machine) grantNow(req grantRequest) bool {
	if st := m.check(req); st != StatusGranted {
		m.reply(req, st, Range{})
		return true
	}
	if m.nextOffset+req.count > m.res.end {
		return false
	}
	r := Range{First: m.nextOffset, End: m.nextOffset + req.count}
	m.nextOffset = r.End
	m.segs.push(segment{Range: r, ledger: req.ledger, deadline: m.now + m.cfg.GrantLease})
	m.res.granted += req.count
	m.reply(req, StatusGranted, r)
	return true
}

// drain answers queued requests in order until one must wait for the
// reservation.
func (m *Machine) drain() {
	if m.phase != phaseServing {
		return
	}
	i := 0
	for ; i < len(m.pending); i++ {
		if !m.grantNow(m.pending[i]) {
			m.res.demand = m.pendingDemand(i)
			m.maybeReserve()
			break
		}
	}
	n := copy(m.pending, m.pending[i:])
	clear(m.pending[n:])
	m.pending = m.pending[:n]
	if len(m.pending) == 0 {
		m.res.demand = 0
	}
	m.maybeReserve()
}

func (m *Machine) pendingDemand(from int) uint64 {
	var d uint64
	for _, r := range m.pending[from:] {
		d += r.count
	}
	return d
}

// check applies the §5 validity rule of Grant(n, L).
func (m *Machine) check(req grantRequest) GrantStatus {
	if m.phase != phaseServing {
		return StatusNotLeader
	}
	return m.checkRequest(req)
}

// checkRequest is check without the phase: the request, its session and
// its ledger.
func (m *Machine) checkRequest(req grantRequest) GrantStatus {
	if req.count == 0 || req.count > m.cfg.MaxGrant {
		return StatusBadRequest
	}
	s := m.sessions[req.session]
	if !m.sessionAlive(s) {
		return StatusSessionDead
	}
	l := m.ledgers[req.ledger]
	switch {
	case l == nil:
		return StatusUnknownLedger
	case l.Writer != s.incarnation:
		return StatusWrongWriter
	case l.state != ledgerOpen || l.Epoch != m.cfg.Epoch:
		return StatusLedgerNotOpen
	}
	return StatusGranted
}

func (m *Machine) reply(req grantRequest, st GrantStatus, r Range) {
	m.out.Grants = append(m.out.Grants, GrantReply{
		Session: req.session, RequestID: req.requestID, Ledger: req.ledger,
		Status: st, Range: r, Epoch: m.cfg.Epoch,
	})
}

func (m *Machine) refuseAll(st GrantStatus) {
	for _, req := range m.pending {
		m.reply(req, st, Range{})
	}
	m.pending = m.pending[:0]
}

// expireLeases asks to close every open ledger holding a grant whose lease
// ran out. Deadlines grow with offsets, so the scan stops at the first
// unexpired grant.
func (m *Machine) expireLeases() {
	for _, s := range m.segs.live() {
		if s.resolved() || s.ledger == 0 {
			continue
		}
		if s.deadline > m.now {
			return
		}
		if l := m.ledgers[s.ledger]; l != nil && l.state == ledgerOpen {
			m.startClose(l)
		}
	}
}
