package ingest

import (
	"cmp"
	"context"
	"encoding/json"
	"sort"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"orderlog/ingest/httpapi"
	"orderlog/internal/apierr"
	"orderlog/internal/keys"
	"orderlog/internal/partition"
	"orderlog/proto/orderlogpb"
)

// topicRecord is a topic's etcd record at keys.Topic(name).
type topicRecord struct {
	Version int    `json:"version"`
	Name    string `json:"name"`
	Created string `json:"created"`
	// The cleanup configuration (orderlogpb.TopicConfig; retention reads
	// these fields: ingest/retention/topics.go).
	// Partitions is the topic's virtual partition count, fixed at creation
	// (0 in a record written before topics had partitions: partition.Default).
	Partitions        uint32 `json:"partitions,omitempty"`
	CleanupPolicy     string `json:"cleanup_policy,omitempty"`
	RetentionMs       int64  `json:"retention_ms,omitempty"`
	DeleteRetentionMs int64  `json:"delete_retention_ms,omitempty"`
	RetentionBytes    int64  `json:"retention_bytes,omitempty"`
}

// CreateTopic creates a topic with its partition count (0: partition.Default)
// and cleanup configuration (nil: the defaults); TOPIC_EXISTS if it is
// there already. It returns the topic as created.
func CreateTopic(ctx context.Context, cli *clientv3.Client, req *orderlogpb.CreateTopicRequest) (*orderlogpb.Topic, error) {
	topic, value, err := newTopicRecord(req)
	if err != nil {
		return nil, err
	}
	txn, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(keys.Topic(req.Name)), "=", 0)).
		Then(clientv3.OpPut(keys.Topic(req.Name), value)).Commit()
	if err != nil {
		return nil, apierr.New(apierr.Unavailable, "create topic: %v", err)
	}
	if !txn.Succeeded {
		return nil, apierr.New(apierr.TopicExists, "topic %q exists", req.Name)
	}
	return topic, nil
}

// newTopicRecord validates a creation and returns the topic and its
// record's value.
func newTopicRecord(req *orderlogpb.CreateTopicRequest) (*orderlogpb.Topic, string, error) {
	if err := httpapi.ValidateTopicName(req.Name); err != nil {
		return nil, "", err
	}
	if err := validateTopicConfig(req.Config); err != nil {
		return nil, "", err
	}
	partitions, err := validatePartitions(req.Partitions)
	if err != nil {
		return nil, "", err
	}
	config := req.Config
	value, err := json.Marshal(topicRecord{Version: 1, Name: req.Name, Created: time.Now().UTC().Format(time.RFC3339),
		Partitions:    partitions,
		CleanupPolicy: config.GetCleanupPolicy(), RetentionMs: config.GetRetentionMs(), DeleteRetentionMs: config.GetDeleteRetentionMs(),
		RetentionBytes: config.GetRetentionBytes()})
	if err != nil {
		return nil, "", err
	}
	return &orderlogpb.Topic{Name: req.Name, Config: config, Partitions: partitions}, string(value), nil
}

// validatePartitions returns a creation's partition count: 0 is the
// default, more than partition.Max is refused.
func validatePartitions(n uint32) (uint32, error) {
	switch {
	case n == 0:
		return partition.Default, nil
	case n > partition.Max:
		return 0, apierr.New(apierr.InvalidArgument, "partitions %d: want 1 to %d", n, partition.Max)
	}
	return n, nil
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
				DeleteRetentionMs: rec.DeleteRetentionMs, RetentionBytes: rec.RetentionBytes},
			Partitions: rec.partitions()})
	}
	sort.Slice(topics, func(i, j int) bool { return topics[i].Name < topics[j].Name })
	return topics, nil
}

// partitions is the record's partition count.
func (r topicRecord) partitions() uint32 { return cmp.Or(r.Partitions, partition.Default) }

// Topics knows the partition counts of topics. A topic is never deleted and
// its partition count never changes, so what it learned once stays true.
// Safe for concurrent use.
type Topics struct {
	etcd *clientv3.Client
	mu   struct {
		sync.RWMutex
		partitions map[string]uint32
	}
}

// NewTopics returns an empty Topics reading etcd.
func NewTopics(etcd *clientv3.Client) *Topics {
	t := &Topics{etcd: etcd}
	t.mu.partitions = make(map[string]uint32)
	return t
}

// known returns a topic's partition count if it was learned before.
func (t *Topics) known(name string) (uint32, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	n, ok := t.mu.partitions[name]
	return n, ok
}

func (t *Topics) learn(name string, partitions uint32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.mu.partitions[name] = partitions
}

// Partitions returns a topic's partition count; UNKNOWN_TOPIC if it does
// not exist.
func (t *Topics) Partitions(ctx context.Context, name string) (uint32, error) {
	if n, ok := t.known(name); ok {
		return n, nil
	}
	resp, err := t.etcd.Get(ctx, keys.Topic(name))
	if err != nil {
		return 0, apierr.New(apierr.Unavailable, "read topic %q: %v", name, err)
	}
	if len(resp.Kvs) == 0 {
		return 0, apierr.New(apierr.UnknownTopic, "topic %q does not exist", name)
	}
	return t.learnRecord(name, resp.Kvs[0].Value), nil
}

// Ensure returns a topic's partition count, creating the topic with the
// defaults first if it does not exist (topics are created on first use, as
// well as explicitly). One etcd transaction the first time a name is seen.
func (t *Topics) Ensure(ctx context.Context, name string) (uint32, error) {
	if n, ok := t.known(name); ok {
		return n, nil
	}
	_, value, err := newTopicRecord(&orderlogpb.CreateTopicRequest{Name: name})
	if err != nil {
		return 0, err
	}
	key := keys.Topic(name)
	txn, err := t.etcd.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, value)).Else(clientv3.OpGet(key)).Commit()
	if err != nil {
		return 0, apierr.New(apierr.Unavailable, "create topic %q: %v", name, err)
	}
	if !txn.Succeeded {
		if kvs := txn.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
			value = string(kvs[0].Value)
		}
	}
	return t.learnRecord(name, []byte(value)), nil
}

func (t *Topics) learnRecord(name string, value []byte) uint32 {
	var rec topicRecord
	_ = json.Unmarshal(value, &rec) // a record that does not decode has the defaults, as in ListTopics
	n := rec.partitions()
	t.learn(name, n)
	return n
}
