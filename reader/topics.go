package reader

import (
	"sync/atomic"
	"time"

	"orderlog/proto/orderlogpb"
)

// A topic's own retention (retention_ms) hides its messages once they are
// that old, wherever they lie: an unfiltered read reports them as skipped
// ranges with reason "retention", a read filtered by topic or key leaves
// them out as it leaves out what does not match. Their bytes go when the
// log start passes them (one global log frees space by offset range).

// SkipRetention is the reason of a skipped range of messages past their
// topic's retention.
const SkipRetention = "retention"

// topicRetention maps topics to their retention (only topics that have
// one), replaced whole at every change.
type topicRetention struct {
	byTopic atomic.Pointer[map[string]time.Duration]
}

// SetTopicRetention installs the topics' retentions (retention_ms > 0).
func (r *Reader) SetTopicRetention(retention map[string]time.Duration) {
	r.topics.byTopic.Store(&retention)
}

// expired reports whether a message of topic ingested at ingestMicros is
// past its topic's retention.
func (t *topicRetention) expired(topic string, ingestMicros int64) bool {
	m := t.byTopic.Load()
	if m == nil {
		return false
	}
	limit, ok := (*m)[topic]
	return ok && limit > 0 && time.Since(time.UnixMicro(ingestMicros)) > limit
}

// skipExpired reports offset as skipped for retention, joining the range
// just before it.
func skipExpired(page *orderlogpb.ReadResponse, offset uint64) {
	if n := len(page.Skipped); n > 0 && page.Skipped[n-1].End == offset && page.Skipped[n-1].Reason == SkipRetention {
		page.Skipped[n-1].End++
		return
	}
	page.Skipped = append(page.Skipped, &orderlogpb.SkippedRange{First: offset, End: offset + 1, Reason: SkipRetention})
}
