package retention

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"orderlog/internal/keys"
)

// DefaultDeleteRetention is how long a compacted topic keeps a tombstone
// below the log start (Kafka's delete.retention.ms).
const DefaultDeleteRetention = 24 * time.Hour

// topicFields are the topic record's cleanup fields (the record is package
// ingest's).
type topicFields struct {
	CleanupPolicy     string `json:"cleanup_policy"`
	RetentionMs       int64  `json:"retention_ms"`
	DeleteRetentionMs int64  `json:"delete_retention_ms"`
	RetentionBytes    int64  `json:"retention_bytes"`
}

// Topics are the topics' cleanup configurations, by name.
type Topics map[string]topicFields

func decodeTopics(kvs []*mvccpb.KeyValue) Topics {
	out := make(Topics, len(kvs))
	for _, kv := range kvs {
		var f topicFields
		if json.Unmarshal(kv.Value, &f) == nil {
			out[strings.TrimPrefix(string(kv.Key), keys.TopicsPrefix)] = f
		}
	}
	return out
}

// Retentions are the topics' own retentions (retention_ms > 0).
func (t Topics) Retentions() map[string]time.Duration {
	out := make(map[string]time.Duration)
	for name, f := range t {
		if f.RetentionMs > 0 {
			out[name] = time.Duration(f.RetentionMs) * time.Millisecond
		}
	}
	return out
}

// ByteLimited are the topics with a byte limit (retention_bytes > 0):
// ingest counts their bytes in every ledger (ledger.Metadata.TopicBytes).
func (t Topics) ByteLimited() map[string]bool {
	out := make(map[string]bool)
	for name, f := range t {
		if f.RetentionBytes > 0 {
			out[name] = true
		}
	}
	return out
}

// readPolicies reads the topics whose policy keeps messages below the log
// start or limits their bytes.
// A record that does not decode is logged and counts as keeping nothing:
// one bad record must not stop retention.
func readPolicies(ctx context.Context, cli *clientv3.Client, logger *slog.Logger) (map[string]TopicPolicy, error) {
	resp, err := cli.Get(ctx, keys.TopicsPrefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("list topics: %w", err)
	}
	out := make(map[string]TopicPolicy)
	for _, kv := range resp.Kvs {
		var f topicFields
		if err := json.Unmarshal(kv.Value, &f); err != nil {
			logger.Warn("retention: a topic record does not decode; it keeps nothing below the log start", "key", string(kv.Key), "err", err)
			continue
		}
		p := TopicPolicy{Compact: f.CleanupPolicy == "compact", Retention: time.Duration(f.RetentionMs) * time.Millisecond,
			DeleteRetention: time.Duration(f.DeleteRetentionMs) * time.Millisecond, Bytes: f.RetentionBytes}
		if f.RetentionMs < 0 {
			p.Retention = -1
		}
		if p.DeleteRetention == 0 {
			p.DeleteRetention = DefaultDeleteRetention
		}
		if p.keeps() || p.Bytes > 0 {
			out[strings.TrimPrefix(string(kv.Key), keys.TopicsPrefix)] = p
		}
	}
	return out, nil
}
