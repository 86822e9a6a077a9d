package retention

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"orderlog/internal/keys"
)

// WatchStart calls set with the log start now and at every move, until
// ctx ends; a watch that ends (etcd compacted past it, or failed) is read
// and opened again.
func WatchStart(ctx context.Context, cli *clientv3.Client, set func(uint64)) {
	for ctx.Err() == nil {
		resp, err := cli.Get(ctx, keys.LogStart)
		if err == nil {
			if len(resp.Kvs) > 0 {
				if start, err := ParseStart(resp.Kvs[0].Value); err == nil {
					set(start)
				}
			}
			watchStartFrom(ctx, cli, resp.Header.Revision, set)
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

func watchStartFrom(ctx context.Context, cli *clientv3.Client, revision int64, set func(uint64)) {
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for resp := range cli.Watch(ctx, keys.LogStart, clientv3.WithRev(revision+1)) {
		if resp.Err() != nil {
			return
		}
		for _, ev := range resp.Events {
			if start, err := ParseStart(ev.Kv.Value); err == nil && ev.Type == clientv3.EventTypePut {
				set(start)
			}
		}
	}
}

// WatchRetained calls set with the retained set's pointer now and at every
// switch, until ctx ends.
func WatchRetained(ctx context.Context, cli *clientv3.Client, set func(Retained)) {
	for ctx.Err() == nil {
		resp, err := cli.Get(ctx, keys.Retained)
		if err == nil {
			if len(resp.Kvs) > 0 {
				if r, err := DecodeRetained(resp.Kvs[0].Value); err == nil {
					set(r)
				}
			}
			watchRetainedFrom(ctx, cli, resp.Header.Revision, set)
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

func watchRetainedFrom(ctx context.Context, cli *clientv3.Client, revision int64, set func(Retained)) {
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for resp := range cli.Watch(ctx, keys.Retained, clientv3.WithRev(revision+1)) {
		if resp.Err() != nil {
			return
		}
		for _, ev := range resp.Events {
			if r, err := DecodeRetained(ev.Kv.Value); err == nil && ev.Type == clientv3.EventTypePut {
				set(r)
			}
		}
	}
}

// WatchTopicRetention calls set with every topic's own retention
// (retention_ms > 0) now and after every topic change, until ctx ends.
func WatchTopicRetention(ctx context.Context, cli *clientv3.Client, set func(map[string]time.Duration)) {
	for ctx.Err() == nil {
		resp, err := cli.Get(ctx, keys.TopicsPrefix, clientv3.WithPrefix())
		if err == nil {
			set(topicRetentions(resp.Kvs))
			watchTopicsFrom(ctx, cli, resp.Header.Revision, set)
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

func watchTopicsFrom(ctx context.Context, cli *clientv3.Client, revision int64, set func(map[string]time.Duration)) {
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for resp := range cli.Watch(ctx, keys.TopicsPrefix, clientv3.WithPrefix(), clientv3.WithRev(revision+1)) {
		if resp.Err() != nil {
			return
		}
		if len(resp.Events) > 0 {
			return // re-read them all: a change is rare, and the map is small
		}
	}
}
