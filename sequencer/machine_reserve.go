package sequencer

import "time"

// Reservation asks for the CAS seq/reserved: Expect → New, in a transaction
// that also compares seq/epoch with the leader's epoch.
type Reservation struct {
	Expect uint64
	New    uint64
}

// reservation tracks the current epoch's reserved block and recent traffic.
type reservation struct {
	end       uint64 // R: exclusive end of what this epoch may grant
	lastBlock uint64 // size of the latest extension (0 before the first)
	inFlight  bool   // a Reserve is out and unanswered
	demand    uint64 // offsets queued requests wait for
	granted   uint64 // offsets granted since rateStart
	rateStart time.Duration
	rate      float64 // offsets per second over the last full window
}

// sample closes a one-second rate window.
func (r *reservation) sample(now, ahead time.Duration) {
	if elapsed := now - r.rateStart; elapsed >= time.Second {
		r.rate = float64(r.granted) / elapsed.Seconds()
		r.granted = 0
		r.rateStart = now
	}
}

// ReservationExtended reports that the CAS of a Reserve succeeded.
func (m *Machine) ReservationExtended(newEnd uint64) {
	m.res.inFlight = false
	if m.phase == phaseDeposed || newEnd <= m.res.end {
		return
	}
	m.res.lastBlock, m.res.end = newEnd-m.res.end, newEnd
	if m.phase == phaseReserving {
		m.phase = phaseServing
	}
	m.drain()
}

// ReservationFailed reports that a Reserve failed for a reason other than
// a newer epoch (for that, call Deposed); the next Tick retries.
func (m *Machine) ReservationFailed() { m.res.inFlight = false }

// maybeReserve extends the reservation at 50% use of the current block, or
// at once when a request waits for offsets beyond R.
func (m *Machine) maybeReserve() {
	if m.res.inFlight || (m.phase != phaseServing && m.phase != phaseReserving) {
		return
	}
	// Half of the latest block used: at most half of it remains.
	remaining := m.res.end - min(m.nextOffset, m.res.end)
	need := m.phase == phaseReserving || m.res.demand > 0 || remaining*2 <= m.res.lastBlock
	if !need {
		return
	}
	block := max(m.cfg.MinReserveBlock, uint64(m.res.rate*m.cfg.ReserveAhead.Seconds()), 2*m.res.demand)
	m.res.inFlight = true
	m.out.Reserve = &Reservation{Expect: m.res.end, New: m.res.end + block}
}
