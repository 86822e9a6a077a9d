package retention

import (
	"cmp"
	"slices"
	"time"

	"orderlog/ingest/batch"
	"orderlog/ingest/ledger"
)

// The retained set (DESIGN.md §8, "compacted topics"): the messages below
// the log start that a topic's policy keeps after the ledgers holding them
// are deleted — the latest message of each key of a compacted topic, and
// every message of a topic whose retention outlasts the log's. They keep
// their offsets; reads below the log start serve them, and the offsets
// between them read as skipped ranges with reason "compacted".

// TopicPolicy is a topic's cleanup configuration.
type TopicPolicy struct {
	// Compact: below the log start only the latest message of each key is
	// kept (Kafka's cleanup.policy=compact); a message with an empty value
	// is a tombstone, kept DeleteRetention after its ingest time, and then
	// gone with its key. Messages without a key are not kept.
	Compact         bool
	DeleteRetention time.Duration
	// Retention, if longer than the log's, keeps the topic's messages (all
	// of them, or a compacted topic's latest per key) for that long after
	// their ingest time; negative keeps them forever. 0: the log's.
	Retention time.Duration
	// Bytes, if positive, is the topic's byte limit (topicstarts.go), and
	// Start the offset below which its messages are past it.
	Bytes int64
	Start uint64
}

// keeps reports whether the policy keeps anything below the log start.
func (p TopicPolicy) keeps() bool { return p.Compact || p.Retention != 0 }

// Kept is one message of the retained set, with what the batch format
// carries beside the record.
type Kept struct {
	Offset           uint64
	IngestTimeMicros int64
	ProducerID       uint64
	Epoch, Seq       uint64
	Record           batch.Record
}

// Compact merges the retained set with the messages that fell below the
// log start since (added, all at offsets above every retained one), and
// returns the new retained set in offset order: for a compacted topic the
// latest message of each key, minus tombstones older than their delete
// retention; for any topic only messages within its retention (negative:
// forever). Topics without a policy that keeps keep nothing.
func Compact(retained, added []Kept, policies map[string]TopicPolicy, now time.Time) []Kept {
	all := slices.Concat(retained, added)
	latest := make(map[topicKey]uint64) // (topic, key) → its latest offset
	for _, k := range all {
		if p := policies[k.Record.Topic]; p.Compact && len(k.Record.Key) > 0 {
			tk := topicKey{k.Record.Topic, string(k.Record.Key)}
			latest[tk] = max(latest[tk], k.Offset)
		}
	}
	out := make([]Kept, 0, len(latest))
	for _, k := range all {
		if keep(k, policies[k.Record.Topic], latest, now) {
			out = append(out, k)
		}
	}
	slices.SortFunc(out, func(a, b Kept) int { return cmp.Compare(a.Offset, b.Offset) })
	return out
}

type topicKey struct{ topic, key string }

func keep(k Kept, p TopicPolicy, latest map[topicKey]uint64, now time.Time) bool {
	if !p.keeps() || k.Offset < p.Start {
		return false
	}
	age := now.Sub(time.UnixMicro(k.IngestTimeMicros))
	if p.Retention > 0 && age > p.Retention {
		return false
	}
	if !p.Compact {
		return p.Retention != 0
	}
	if len(k.Record.Key) == 0 || latest[topicKey{k.Record.Topic, string(k.Record.Key)}] != k.Offset {
		return false
	}
	tombstone := len(k.Record.Value) == 0
	return !tombstone || age <= p.DeleteRetention
}

// FromBatch returns the messages of a decoded batch as Kept, for topics
// for which want is true.
func FromBatch(h batch.Header, records []batch.Record, want func(topic string) bool) []Kept {
	var out []Kept
	i := 0
	for _, run := range h.Runs {
		for j := uint32(0); j < run.Count; j, i = j+1, i+1 {
			if i < len(records) && want(records[i].Topic) {
				out = append(out, Kept{Offset: h.FirstOffset + uint64(i), IngestTimeMicros: h.IngestTimeMicros,
					ProducerID: run.ProducerID, Epoch: run.Epoch, Seq: run.FirstSeq + uint64(j), Record: records[i]})
			}
		}
	}
	return out
}

// Batches groups kept messages into batches of consecutive offsets, one
// ingest time and at most maxRecords records each, in offset order: the
// retained ledgers' entries, decoded by readers like any batch.
func Batches(kept []Kept, maxRecords int) []KeptBatch {
	var out []KeptBatch
	for start := 0; start < len(kept); {
		end := start + 1
		for end < len(kept) && end-start < maxRecords && kept[end].Offset == kept[end-1].Offset+1 &&
			kept[end].IngestTimeMicros == kept[start].IngestTimeMicros {
			end++
		}
		out = append(out, newKeptBatch(kept[start:end]))
		start = end
	}
	return out
}

// KeptBatch is one retained entry.
type KeptBatch struct {
	Header  batch.Header
	Records []batch.Record
}

func newKeptBatch(kept []Kept) KeptBatch {
	b := KeptBatch{Header: batch.Header{Kind: batch.KindRecords, FirstOffset: kept[0].Offset, Count: uint32(len(kept)),
		IngestTimeMicros: kept[0].IngestTimeMicros}}
	for _, k := range kept {
		runs := b.Header.Runs
		if n := len(runs); n > 0 && runs[n-1].ProducerID == k.ProducerID && runs[n-1].Epoch == k.Epoch &&
			(k.ProducerID == 0 || runs[n-1].FirstSeq+uint64(runs[n-1].Count) == k.Seq) {
			runs[n-1].Count++
		} else {
			b.Header.Runs = append(runs, batch.ProducerRun{ProducerID: k.ProducerID, Epoch: k.Epoch, FirstSeq: k.Seq, Count: 1})
		}
		b.Records = append(b.Records, k.Record)
	}
	return b
}

// topicBytes is what each topic's records take in the batch, counted as
// ingest counts them (coordinator.RecordBytes: the record's fields and
// 32 bytes of framing), for the topics' byte limits.
func (b KeptBatch) topicBytes() []ledger.TopicBytes {
	const recordFraming = 32
	var out []ledger.TopicBytes
	for _, r := range b.Records {
		size := int64(len(r.Topic) + len(r.Key) + len(r.Value) + len(r.MessageID) + recordFraming)
		for _, h := range r.Headers {
			size += int64(len(h.Key) + len(h.Value) + 4)
		}
		if i := slices.IndexFunc(out, func(t ledger.TopicBytes) bool { return t.Topic == r.Topic }); i >= 0 {
			out[i].Bytes += size
		} else {
			out = append(out, ledger.TopicBytes{Topic: r.Topic, Bytes: size})
		}
	}
	return out
}
