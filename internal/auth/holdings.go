package auth

import "sync"

// Holdings counts what each key — a principal, a remote address — holds
// open on this node (streams, connections), and refuses a key at its
// limit. Unlike a Limiter's buckets it bounds how much at once, not how
// much per second. The zero value is ready to use.
type Holdings struct {
	mu   sync.Mutex
	held map[string]int // absent: 0; a key at 0 is removed, so the map holds only open keys
}

// Acquire takes one for key unless key already holds limit (limit ≤ 0:
// no bound). Every true must be matched by one Release.
func (h *Holdings) Acquire(key string, limit int) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if limit > 0 && h.held[key] >= limit {
		return false
	}
	if h.held == nil {
		h.held = map[string]int{}
	}
	h.held[key]++
	return true
}

// Release gives back one that Acquire took for key.
func (h *Holdings) Release(key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.held[key] <= 1 {
		delete(h.held, key)
		return
	}
	h.held[key]--
}

// Held is how many key holds now.
func (h *Holdings) Held(key string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.held[key]
}
