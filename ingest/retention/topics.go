package retention

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

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
}

// readPolicies reads the topics whose policy keeps messages below the log
// start.
func readPolicies(ctx context.Context, cli *clientv3.Client) (map[string]TopicPolicy, error) {
	resp, err := cli.Get(ctx, keys.TopicsPrefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("list topics: %w", err)
	}
	out := make(map[string]TopicPolicy)
	for _, kv := range resp.Kvs {
		var f topicFields
		if err := json.Unmarshal(kv.Value, &f); err != nil {
			return nil, fmt.Errorf("decode topic %q: %w", kv.Key, err)
		}
		p := TopicPolicy{Compact: f.CleanupPolicy == "compact", Retention: time.Duration(f.RetentionMs) * time.Millisecond,
			DeleteRetention: time.Duration(f.DeleteRetentionMs) * time.Millisecond}
		if f.RetentionMs < 0 {
			p.Retention = -1
		}
		if p.DeleteRetention == 0 {
			p.DeleteRetention = DefaultDeleteRetention
		}
		if p.keeps() {
			out[strings.TrimPrefix(string(kv.Key), keys.TopicsPrefix)] = p
		}
	}
	return out, nil
}
