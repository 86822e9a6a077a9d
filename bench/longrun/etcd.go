package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"orderlog/internal/keys"
)

// etcdPeek reads, from the dev's etcd, what bounds a takeover's and a
// fresh reader's work: the newest commit-log checkpoint (the pointer's
// JSON, docs/format/commit-log.md §5), the size of the commit-ledger list
// and how many ledger records etcd holds.
func etcdPeek(etcdAddr string) string {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + etcdAddr}, DialTimeout: 5 * time.Second})
	if err != nil {
		return fmt.Sprintf("etcd: %v", err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	checkpoint := "none"
	if resp, err := cli.Get(ctx, keys.SeqCheckpoint); err != nil {
		return fmt.Sprintf("etcd: %v", err)
	} else if len(resp.Kvs) > 0 {
		var p struct {
			Ledger, Start, End uint64
		}
		if err := json.Unmarshal(resp.Kvs[0].Value, &p); err != nil {
			checkpoint = fmt.Sprintf("undecodable (%v)", err)
		} else {
			checkpoint = fmt.Sprintf("ledger %d covering [%d, %d)", p.Ledger, p.Start, p.End)
		}
	}
	commitLedgers := -1
	if resp, err := cli.Get(ctx, keys.SeqCommitLedgers); err == nil && len(resp.Kvs) > 0 {
		var list struct {
			Ledgers []json.RawMessage
		}
		if json.Unmarshal(resp.Kvs[0].Value, &list) == nil {
			commitLedgers = len(list.Ledgers)
		}
	}
	ledgers := int64(-1)
	if resp, err := cli.Get(ctx, keys.LedgersPrefix, clientv3.WithPrefix(), clientv3.WithCountOnly()); err == nil {
		ledgers = resp.Count
	}
	return fmt.Sprintf("checkpoint %s; commit ledgers listed %d; ledger records %d", checkpoint, commitLedgers, ledgers)
}
