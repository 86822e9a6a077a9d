package ingest

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"orderlog/ingest/httpapi"
	"orderlog/internal/apierr"
	"orderlog/internal/keys"
	"orderlog/proto/orderlogpb"
)

// topicRecord is a topic's etcd record at keys.Topic(name).
type topicRecord struct {
	Version int    `json:"version"`
	Name    string `json:"name"`
	Created string `json:"created"`
	// The cleanup configuration (orderlogpb.TopicConfig; retention reads
	// these fields: ingest/retention/topics.go).
	CleanupPolicy     string `json:"cleanup_policy,omitempty"`
	RetentionMs       int64  `json:"retention_ms,omitempty"`
	DeleteRetentionMs int64  `json:"delete_retention_ms,omitempty"`
	RetentionBytes    int64  `json:"retention_bytes,omitempty"`
}

// CreateTopic creates a topic with a cleanup configuration (nil: the
// defaults); TOPIC_EXISTS if it is there already.
func CreateTopic(ctx context.Context, cli *clientv3.Client, name string, config *orderlogpb.TopicConfig) error {
	if err := httpapi.ValidateTopicName(name); err != nil {
		return err
	}
	if err := validateTopicConfig(config); err != nil {
		return err
	}
	value, err := json.Marshal(topicRecord{Version: 1, Name: name, Created: time.Now().UTC().Format(time.RFC3339),
		CleanupPolicy: config.GetCleanupPolicy(), RetentionMs: config.GetRetentionMs(), DeleteRetentionMs: config.GetDeleteRetentionMs(),
		RetentionBytes: config.GetRetentionBytes()})
	if err != nil {
		return err
	}
	txn, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(keys.Topic(name)), "=", 0)).
		Then(clientv3.OpPut(keys.Topic(name), string(value))).Commit()
	if err != nil {
		return apierr.New(apierr.Unavailable, "create topic: %v", err)
	}
	if !txn.Succeeded {
		return apierr.New(apierr.TopicExists, "topic %q exists", name)
	}
	return nil
}

// maxRetentionMs is 100 years: a retention beyond it is forever (-1), and
// a larger value would overflow a time.Duration.
const maxRetentionMs = 100 * 365 * 24 * 3600 * 1000

// validateTopicConfig refuses a cleanup configuration that means nothing.
func validateTopicConfig(c *orderlogpb.TopicConfig) error {
	switch {
	case c == nil:
		return nil
	case c.CleanupPolicy != "" && c.CleanupPolicy != "delete" && c.CleanupPolicy != "compact":
		return apierr.New(apierr.InvalidArgument, "cleanup_policy %q: want \"delete\" or \"compact\"", c.CleanupPolicy)
	case c.RetentionMs < -1 || c.RetentionMs > maxRetentionMs:
		return apierr.New(apierr.InvalidArgument, "retention_ms %d: want 0 to %d, or -1 for forever", c.RetentionMs, int64(maxRetentionMs))
	case c.DeleteRetentionMs < 0 || c.DeleteRetentionMs > maxRetentionMs:
		return apierr.New(apierr.InvalidArgument, "delete_retention_ms %d: want 0 to %d", c.DeleteRetentionMs, int64(maxRetentionMs))
	case c.RetentionBytes < 0:
		return apierr.New(apierr.InvalidArgument, "retention_bytes %d: want 0 (no limit of its own) or more", c.RetentionBytes)
	}
	return nil
}

// ListTopics returns the topics in name order, with their configuration.
func ListTopics(ctx context.Context, cli *clientv3.Client) ([]*orderlogpb.Topic, error) {
	resp, err := cli.Get(ctx, keys.TopicsPrefix, clientv3.WithPrefix())
	if err != nil {
		return nil, apierr.New(apierr.Unavailable, "list topics: %v", err)
	}
	topics := make([]*orderlogpb.Topic, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var rec topicRecord
		_ = json.Unmarshal(kv.Value, &rec) // a record that does not decode lists with the defaults
		topics = append(topics, &orderlogpb.Topic{Name: strings.TrimPrefix(string(kv.Key), keys.TopicsPrefix),
			Config: &orderlogpb.TopicConfig{CleanupPolicy: cmp.Or(rec.CleanupPolicy, "delete"), RetentionMs: rec.RetentionMs,
				DeleteRetentionMs: rec.DeleteRetentionMs, RetentionBytes: rec.RetentionBytes}})
	}
	sort.Slice(topics, func(i, j int) bool { return topics[i].Name < topics[j].Name })
	return topics, nil
}

// ensureTopic creates a topic unless it exists (topics are created on
// first use, as well as explicitly).
func ensureTopic(ctx context.Context, cli *clientv3.Client, name string) error {
	err := CreateTopic(ctx, cli, name, nil)
	if err == nil || apierr.As(err).Code == apierr.TopicExists {
		return nil
	}
	return fmt.Errorf("topic %q: %w", name, err)
}

// noteTopics registers, in the background, the topics of a frame this node
// has not seen yet, so that topic listings show every topic in use.
// Producing never waits for it.
func (n *Node) noteTopics(messages []*orderlogpb.Message) {
	for _, m := range messages {
		if n.topicsSeen[m.Topic] {
			continue
		}
		n.topicsSeen[m.Topic] = true
		topic := m.Topic
		n.async(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = ensureTopic(ctx, n.etcd, topic) // retried when the next node or restart sees it
		})
	}
}
