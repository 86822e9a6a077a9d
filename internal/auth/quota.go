package auth

import (
	"sync"
	"time"
)

// Quota bounds a principal's bytes per second (0: no bound), as Kafka's
// client quotas do.
type Quota struct {
	ProduceBytesPerSec int64 `json:"produce_bytes_per_sec,omitempty"`
	ReadBytesPerSec    int64 `json:"read_bytes_per_sec,omitempty"`
}

// bucket is a token bucket of bytes: it refills at rate per second up to
// one second's worth, and may go into debt by one call's bytes, so a call
// larger than the rate still passes once the bucket is full.
type bucket struct {
	tokens float64
	last   time.Time
}

// take charges n bytes at rate. When the bucket is empty a refusable call
// (a produce frame, refused) is charged nothing; one that already happened
// (bytes sent) is charged all the same, so the debt slows what follows.
// Either way it says how long until the bucket is not empty.
func (b *bucket) take(now time.Time, rate int64, n int, refusable bool) (time.Duration, bool) {
	if !b.last.IsZero() {
		b.tokens = min(float64(rate), b.tokens+now.Sub(b.last).Seconds()*float64(rate))
	} else {
		b.tokens = float64(rate)
	}
	b.last = now
	empty := b.tokens <= 0
	if !empty || !refusable {
		b.tokens -= float64(n)
	}
	if b.tokens < 0 || empty {
		return time.Duration(-min(b.tokens, 0)/float64(rate)*float64(time.Second)) + time.Millisecond, !empty
	}
	return 0, true
}

// Limiter keeps each principal's produce and read buckets on one node.
// Quotas apply per node: a client spread over N nodes gets up to N times
// its quota (docs/security.md).
type Limiter struct {
	mu      sync.Mutex
	produce map[string]*bucket
	read    map[string]*bucket
	now     func() time.Time
}

// NewLimiter returns an empty Limiter.
func NewLimiter() *Limiter {
	return &Limiter{produce: map[string]*bucket{}, read: map[string]*bucket{}, now: time.Now}
}

// Produce charges n bytes of principal's produce quota: false and the wait
// when it is spent.
func (l *Limiter) Produce(principal string, q Quota, n int) (time.Duration, bool) {
	return l.take(l.produce, principal, q.ProduceBytesPerSec, n, true)
}

// Read charges n bytes already sent to principal's read quota: false and
// the wait when the bucket was empty before them; a wait with true when
// they put it in debt.
func (l *Limiter) Read(principal string, q Quota, n int) (time.Duration, bool) {
	return l.take(l.read, principal, q.ReadBytesPerSec, n, false)
}

func (l *Limiter) take(buckets map[string]*bucket, principal string, rate int64, n int, refusable bool) (time.Duration, bool) {
	if rate <= 0 {
		return 0, true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := buckets[principal]
	if !ok {
		b = &bucket{}
		buckets[principal] = b
	}
	return b.take(l.now(), rate, n, refusable)
}

// QuotaOf is principal's quota: its own, else the one set for "*", else
// none.
func (st *State) QuotaOf(principal string) Quota {
	if q, ok := st.Quotas[principal]; ok {
		return q
	}
	return st.Quotas["*"]
}
