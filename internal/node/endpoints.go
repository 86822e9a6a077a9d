package node

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	clientv3 "go.etcd.io/etcd/client/v3"

	"orderlog/internal/keys"
)

// clientEndpoints lists the gRPC addresses clients can use, for
// Admin/Status: every process with the ingest role opens a WAL store and
// registers it at keys.Store(id) with the address of its one gRPC server,
// which also serves the Producer, Reader and Admin services. A registration
// is bound to its store's lease, so a stopped node drops out of the list.
// Reader-only and sequencer-only processes are not listed.
func clientEndpoints(ctx context.Context, cli *clientv3.Client) ([]string, error) {
	resp, err := cli.Get(ctx, keys.StoresPrefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("list stores: %w", err)
	}
	var addrs []string
	for _, kv := range resp.Kvs {
		var rec storeRecord
		if json.Unmarshal(kv.Value, &rec) == nil && rec.Address != "" {
			addrs = append(addrs, rec.Address)
		}
	}
	slices.Sort(addrs)
	return slices.Compact(addrs), nil
}
