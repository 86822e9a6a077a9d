package ledger

import "maps"

// TopicBytes is what one topic's messages take in an entry (their record
// bytes, as a batch counts them).
type TopicBytes struct {
	Topic string
	Bytes int64
}

// MaxCountedTopics bounds the topics one ledger's record counts, so that
// the record stays small (a topic name is at most 249 bytes): a topic
// first seen after that many others in the same ledger is not counted
// there, and its byte limit (ingest/retention) counts that ledger as
// holding none of it.
const MaxCountedTopics = 1024

// topicCounts sums TopicBytes per topic; the zero value is empty.
type topicCounts map[string]int64

func (c *topicCounts) add(topics []TopicBytes) {
	for _, t := range topics {
		if *c == nil {
			*c = make(topicCounts)
		}
		if _, ok := (*c)[t.Topic]; ok || len(*c) < MaxCountedTopics {
			(*c)[t.Topic] += t.Bytes
		}
	}
}

func (c topicCounts) clone() map[string]int64 {
	if len(c) == 0 {
		return nil
	}
	return maps.Clone(c)
}
