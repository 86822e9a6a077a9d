package sequencer

import (
	"sync"
	"time"
)

// LeaderHeard records when this process last heard from a sequencer
// leader, by address: an ingest node's grant stream carries a frame at
// least every GrantStreamHeartbeat from a live leader. A standby in the
// same process takes it as a second opinion before it deposes a leader
// whose health probes go unanswered: probes of their own connection may
// fail on a lossy or one-way link, or on a starved machine, while the
// leader serves everybody else, and every needless eviction costs a
// takeover. A leader refusing connections (its process gone) needs no
// second opinion.
type LeaderHeard struct {
	mu sync.Mutex
	at map[string]time.Time
}

// Note records a frame from the leader at addr.
func (h *LeaderHeard) Note(addr string, at time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.at == nil {
		h.at = make(map[string]time.Time)
	}
	if at.After(h.at[addr]) {
		h.at[addr] = at
	}
}

// heardWithin says whether a frame came from the leader at addr within d
// before now. A nil LeaderHeard has heard nothing.
func (h *LeaderHeard) heardWithin(addr string, d time.Duration, now time.Time) bool {
	if h == nil {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	at, ok := h.at[addr]
	return ok && now.Sub(at) < d
}
