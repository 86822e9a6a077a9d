package retention

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"orderlog/internal/keys"
)

// WatchStart calls set with the log start now and at every move, until
// ctx ends.
func WatchStart(ctx context.Context, cli *clientv3.Client, set func(uint64)) {
	watchKey(ctx, cli, keys.LogStart, ParseStart, set)
}

// WatchRetained calls set with the retained set's pointer now and at every
// switch, until ctx ends.
func WatchRetained(ctx context.Context, cli *clientv3.Client, set func(Retained)) {
	watchKey(ctx, cli, keys.Retained, DecodeRetained, set)
}

// WatchTopicStarts calls set with the topics' starts (their byte limits)
// now and at every move, until ctx ends.
func WatchTopicStarts(ctx context.Context, cli *clientv3.Client, set func(TopicStarts)) {
	watchKey(ctx, cli, keys.TopicStarts, DecodeTopicStarts, set)
}

// watchKey calls set with key's value, decoded, now and at every put,
// until ctx ends; a watch that ends (etcd compacted past it, or failed) is
// read and opened again. A value that does not decode is skipped.
func watchKey[T any](ctx context.Context, cli *clientv3.Client, key string, decode func([]byte) (T, error), set func(T)) {
	for ctx.Err() == nil {
		resp, err := cli.Get(ctx, key)
		if err == nil {
			if len(resp.Kvs) > 0 {
				if v, err := decode(resp.Kvs[0].Value); err == nil {
					set(v)
				}
			}
			watchKeyFrom(ctx, cli, key, resp.Header.Revision, decode, set)
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

func watchKeyFrom[T any](ctx context.Context, cli *clientv3.Client, key string, revision int64, decode func([]byte) (T, error), set func(T)) {
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for resp := range cli.Watch(ctx, key, clientv3.WithRev(revision+1)) {
		if resp.Err() != nil {
			return
		}
		for _, ev := range resp.Events {
			if ev.Type != clientv3.EventTypePut {
				continue
			}
			if v, err := decode(ev.Kv.Value); err == nil {
				set(v)
			}
		}
	}
}

// WatchTopics calls set with every topic's cleanup configuration now and
// after every topic change (read again at once), until ctx ends.
func WatchTopics(ctx context.Context, cli *clientv3.Client, set func(Topics)) {
	for ctx.Err() == nil {
		resp, err := cli.Get(ctx, keys.TopicsPrefix, clientv3.WithPrefix())
		if err == nil {
			set(decodeTopics(resp.Kvs))
			if watchTopicsFrom(ctx, cli, resp.Header.Revision) {
				continue
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// watchTopicsFrom returns true at the first topic change after revision,
// false when the watch ends without one.
func watchTopicsFrom(ctx context.Context, cli *clientv3.Client, revision int64) bool {
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for resp := range cli.Watch(ctx, keys.TopicsPrefix, clientv3.WithPrefix(), clientv3.WithRev(revision+1)) {
		if resp.Err() != nil {
			return false
		}
		if len(resp.Events) > 0 {
			return true // re-read them all: a change is rare, and the map is small
		}
	}
	return false
}
