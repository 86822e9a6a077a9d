package ingest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"orderlog/ingest/coordinator"
	"orderlog/internal/keys"
)

// ProducerRecord is a producer's record in etcd as a listing shows it
// (the web console's Producers page). The record changes at InitProducer
// and at takeovers, not per message: it holds no sequence number.
type ProducerRecord struct {
	ID    uint64
	Name  string
	Epoch uint64
	// Owner is the ingest incarnation that appends for the producer
	// ("<node>-<start time>"). OwnerLive: its liveness key exists, with
	// its node's address OwnerAddress; once it is gone the next
	// InitProducer or takeover moves the producer.
	Owner, OwnerAddress string
	OwnerLive           bool
	Principal           string // "" when made while authentication was off
	Expired             bool
	// Bucket: a virtual producer of the Idempotency-Key buckets.
	Bucket bool
}

// ListProducers reads producer records with ids above after, in id order,
// reading at most scan of them, and returns those keep accepts (nil: all),
// up to limit (at least 1). next is the id to pass as after for the rest,
// 0 when no record is left: a page the scan bound ends early holds fewer
// than limit records and a next, so that a filter that keeps few records
// costs one bounded etcd read per page, never a read of every record.
func ListProducers(ctx context.Context, cli *clientv3.Client, after uint64, limit, scan int, keep func(ProducerRecord) bool) (
	records []ProducerRecord, next uint64, err error) {
	resp, err := cli.Get(ctx, keys.Producer(after+1), clientv3.WithRange(clientv3.GetPrefixRangeEnd(keys.ProducersPrefix)),
		clientv3.WithLimit(int64(max(scan, 1))))
	if err != nil {
		return nil, 0, fmt.Errorf("list producers: %w", err)
	}
	live, err := liveIncarnations(ctx, cli)
	if err != nil {
		return nil, 0, err
	}
	for _, kv := range resp.Kvs {
		var rec producerRecord
		if err := json.Unmarshal(kv.Value, &rec); err != nil {
			return nil, 0, fmt.Errorf("decode producer record %s: %w", kv.Key, err)
		}
		address, isLive := live[rec.Owner]
		r := ProducerRecord{ID: rec.ID, Name: rec.Name, Epoch: rec.Epoch, Owner: rec.Owner, OwnerAddress: address, OwnerLive: isLive,
			Principal: rec.Principal, Expired: rec.Expired, Bucket: strings.HasPrefix(rec.Name, coordinator.ReservedProducerPrefix)}
		if keep != nil && !keep(r) {
			next = rec.ID
			continue
		}
		if len(records) == max(limit, 1) {
			return records, next, nil
		}
		records = append(records, r)
		next = rec.ID
	}
	if !resp.More {
		next = 0
	}
	return records, next, nil
}

// liveIncarnations maps each live ingest incarnation to its node's
// address (the value of its liveness key).
func liveIncarnations(ctx context.Context, cli *clientv3.Client) (map[string]string, error) {
	resp, err := cli.Get(ctx, keys.IngestPrefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("list ingest incarnations: %w", err)
	}
	live := make(map[string]string, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		live[strings.TrimPrefix(string(kv.Key), keys.IngestPrefix)] = string(kv.Value)
	}
	return live, nil
}

// LastDurableSeqs is, for each of ids this node owns, the last seq of the
// producer's messages that is durable (absent: not owned here, or none
// durable yet). It asks the node's loop, as Producers does.
func (n *Node) LastDurableSeqs(ids []uint64) map[uint64]uint64 {
	answer := make(chan map[uint64]uint64, 1)
	ask := func() {
		seqs := map[uint64]uint64{}
		for _, id := range ids {
			if st, ok := n.machine.ProducerState(id); ok && st.DurableNext > 0 {
				seqs[id] = st.DurableNext - 1
			}
		}
		answer <- seqs
	}
	if !n.do(ask) {
		return nil
	}
	select {
	case seqs := <-answer:
		return seqs
	case <-n.done:
		return nil
	}
}
