package reader

import (
	"sync/atomic"
	"time"

	"orderlog/proto/orderlogpb"
)

// A topic's own retention (retention_ms) hides its messages once they are
// that old, and its byte limit (retention_bytes) those below the topic's
// start that retention moves (ingest/retention/topicstarts.go), wherever
// they lie: an unfiltered read reports them as skipped
// ranges with reason "retention", a read filtered by topic or key leaves
// them out as it leaves out what does not match. Their bytes go when the
// log start passes them (one global log frees space by offset range).

// SkipRetention is the reason of a skipped range of messages past their
// topic's retention.
const SkipRetention = "retention"

// topicRetention maps topics to their retention and their start (only
// topics that have one), each map replaced whole at every change.
type topicRetention struct {
	byTopic atomic.Pointer[map[string]time.Duration]
	starts  atomic.Pointer[map[string]uint64]
}

// SetTopicRetention installs the topics' retentions (retention_ms > 0).
func (r *Reader) SetTopicRetention(retention map[string]time.Duration) {
	r.topics.byTopic.Store(&retention)
}

// SetTopicStarts installs the topics' starts: below its start a topic's
// messages are past its byte limit.
func (r *Reader) SetTopicStarts(starts map[string]uint64) {
	r.topics.starts.Store(&starts)
}

// TopicStart is the topic's start as last installed (0: none).
func (r *Reader) TopicStart(topic string) uint64 {
	if m := r.topics.starts.Load(); m != nil {
		return (*m)[topic]
	}
	return 0
}

// expired reports whether the message of topic at offset, ingested at
// ingestMicros, is past its topic's retention or byte limit.
func (t *topicRetention) expired(topic string, offset uint64, ingestMicros int64) bool {
	if m := t.starts.Load(); m != nil && offset < (*m)[topic] {
		return true
	}
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
