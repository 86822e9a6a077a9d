package retention

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	clientv3 "go.etcd.io/etcd/client/v3"

	"orderlog/ingest/ledger"
	"orderlog/internal/keys"
)

// A topic's byte limit (retention_bytes) is kept a ledger at a time, as
// Kafka keeps retention.bytes a segment at a time: the ledgers holding the
// topic's oldest messages stop counting while the rest hold more than the
// limit, and the topic's start becomes the end of the last one dropped.
// Reads hide the topic's messages below its start (reason "retention");
// the retained set drops them at its next rebuild; their bytes go with the
// log start. One global log frees space by offset range, so a topic's
// limit can only hide, never free space sooner.

// TopicStarts are the topics' starts: below its start a topic's messages
// are past its byte limit.
type TopicStarts map[string]uint64

// topicStartsRecord is the value at keys.TopicStarts.
type topicStartsRecord struct {
	Version int         `json:"version"`
	Starts  TopicStarts `json:"starts"`
}

// NextTopicStarts returns the starts that the topics' byte limits ask for,
// never below the current ones: counted are the closed ledgers that hold
// messages at or above the log start (each topic's bytes as their writers
// counted them, ledger.Metadata.TopicBytes) and the retained set's.
func NextTopicStarts(current TopicStarts, limits map[string]int64, ledgers []ledger.Metadata, start uint64, retained map[uint64]bool) TopicStarts {
	var counted []ledger.Metadata
	for _, m := range ledgers {
		if m.State == ledger.StateClosed && len(m.TopicBytes) > 0 && (retained[m.ID] || (m.Kind != ledger.KindRetained && m.EndOffset > start)) {
			counted = append(counted, m)
		}
	}
	slices.SortFunc(counted, func(a, b ledger.Metadata) int {
		return cmp.Or(cmp.Compare(a.EndOffset, b.EndOffset), cmp.Compare(a.ID, b.ID))
	})
	next := maps.Clone(current)
	if next == nil {
		next = make(TopicStarts)
	}
	for topic, limit := range limits {
		if limit <= 0 {
			continue
		}
		var total int64
		for _, m := range counted {
			total += m.TopicBytes[topic]
		}
		for _, m := range counted {
			if total <= limit {
				break
			}
			if b := m.TopicBytes[topic]; b > 0 {
				total -= b
				next[topic] = max(next[topic], m.EndOffset)
			}
		}
	}
	return next
}

// ReadTopicStarts reads the topics' starts and the key's mod revision.
func ReadTopicStarts(ctx context.Context, cli *clientv3.Client) (TopicStarts, int64, error) {
	resp, err := cli.Get(ctx, keys.TopicStarts)
	if err != nil {
		return nil, 0, fmt.Errorf("read the topics' starts: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return TopicStarts{}, 0, nil
	}
	starts, err := DecodeTopicStarts(resp.Kvs[0].Value)
	return starts, resp.Kvs[0].ModRevision, err
}

// DecodeTopicStarts decodes the value at keys.TopicStarts.
func DecodeTopicStarts(value []byte) (TopicStarts, error) {
	var rec topicStartsRecord
	if err := json.Unmarshal(value, &rec); err != nil {
		return nil, fmt.Errorf("topics' starts: %w", err)
	}
	if rec.Starts == nil {
		rec.Starts = TopicStarts{}
	}
	return rec.Starts, nil
}

// writeTopicStarts replaces the starts read at revision, while this
// worker leads.
func writeTopicStarts(ctx context.Context, cli *clientv3.Client, starts TopicStarts, revision int64, electionKey string) error {
	value, err := json.Marshal(topicStartsRecord{Version: 1, Starts: starts})
	if err != nil {
		return err
	}
	cmps := append(leading(electionKey), clientv3.Compare(clientv3.ModRevision(keys.TopicStarts), "=", revision))
	resp, err := cli.Txn(ctx).If(cmps...).Then(clientv3.OpPut(keys.TopicStarts, string(value))).Commit()
	if err != nil {
		return fmt.Errorf("write the topics' starts: %w", err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("write the topics' starts: %w", errRaced)
	}
	return nil
}
