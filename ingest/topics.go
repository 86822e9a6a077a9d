package ingest

import (
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
}

// CreateTopic creates a topic; TOPIC_EXISTS if it is there already.
func CreateTopic(ctx context.Context, cli *clientv3.Client, name string) error {
	if err := httpapi.ValidateTopicName(name); err != nil {
		return err
	}
	value, err := json.Marshal(topicRecord{Version: 1, Name: name, Created: time.Now().UTC().Format(time.RFC3339)})
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

// ListTopics returns the topic names in order.
func ListTopics(ctx context.Context, cli *clientv3.Client) ([]string, error) {
	resp, err := cli.Get(ctx, keys.TopicsPrefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, apierr.New(apierr.Unavailable, "list topics: %v", err)
	}
	names := make([]string, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		names = append(names, strings.TrimPrefix(string(kv.Key), keys.TopicsPrefix))
	}
	sort.Strings(names)
	return names, nil
}

// ensureTopic creates a topic unless it exists (topics are created on
// first use, as well as explicitly).
func ensureTopic(ctx context.Context, cli *clientv3.Client, name string) error {
	err := CreateTopic(ctx, cli, name)
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
