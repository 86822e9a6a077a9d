package tiering

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	clientv3 "go.etcd.io/etcd/client/v3"

	"orderlog/internal/keys"
)

// Head is the archive's state in etcd (keys.TieringHead): every offset in
// [First, T) is in the archive, in the files the manifest segments up to
// LastManifest name. T never decreases. Version 1; format in
// docs/format/archive.md.
type Head struct {
	Version int    `json:"version"`
	First   uint64 `json:"first"`
	T       uint64 `json:"t"`
	Files   int64  `json:"files"`
	Rows    int64  `json:"rows"`
	Bytes   int64  `json:"bytes"`
	// LastManifest is the key of the newest manifest segment ("" before
	// the first file).
	LastManifest string `json:"last_manifest,omitempty"`
	// ModRevision is the key's revision when read (0: never written).
	ModRevision int64 `json:"-"`
}

// Plan is the file the elected worker publishes (keys.TieringPlan),
// recorded before its upload: a successor publishes the same range under
// the same keys, whatever it would have cut itself.
type Plan struct {
	Version  int    `json:"version"`
	Epoch    int64  `json:"epoch"` // the planning worker's election key's create revision
	First    uint64 `json:"first"`
	End      uint64 `json:"end"`
	Object   string `json:"object"`
	Manifest string `json:"manifest"`
	// ModRevision is the key's revision when read (0: none).
	ModRevision int64 `json:"-"`
}

const stateVersion = 1

// errRaced: a compare in a transaction failed (another worker, or this
// one deposed); the pass starts over from etcd.
var errRaced = errors.New("tiering: the archive's state changed under the worker")

// ReadHead reads the head (the zero Head if none).
func ReadHead(ctx context.Context, cli *clientv3.Client) (Head, error) {
	var h Head
	rev, err := readJSON(ctx, cli, keys.TieringHead, &h)
	if err != nil {
		return Head{}, fmt.Errorf("read the archive's head: %w", err)
	}
	h.ModRevision = rev
	return h, nil
}

// DecodeHead decodes the head key's value (for watchers).
func DecodeHead(value []byte) (Head, error) {
	var h Head
	if err := json.Unmarshal(value, &h); err != nil {
		return Head{}, fmt.Errorf("archive head: %w", err)
	}
	return h, nil
}

func readPlan(ctx context.Context, cli *clientv3.Client) (Plan, error) {
	var p Plan
	rev, err := readJSON(ctx, cli, keys.TieringPlan, &p)
	if err != nil {
		return Plan{}, fmt.Errorf("read the archive's plan: %w", err)
	}
	p.ModRevision = rev
	return p, nil
}

// readJSON decodes key's value into v; the key's mod revision, 0 if absent.
func readJSON(ctx context.Context, cli *clientv3.Client, key string, v any) (int64, error) {
	resp, err := cli.Get(ctx, key)
	if err != nil {
		return 0, err
	}
	if len(resp.Kvs) == 0 {
		return 0, nil
	}
	if err := json.Unmarshal(resp.Kvs[0].Value, v); err != nil {
		return 0, err
	}
	return resp.Kvs[0].ModRevision, nil
}

// leading compares that electionKey still exists: the worker still leads.
func leading(electionKey string) clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(electionKey), ">", 0)
}

// putPlan records p while this worker leads, the head is as read and no
// plan is recorded; p with its ModRevision.
func putPlan(ctx context.Context, cli *clientv3.Client, head Head, p Plan, electionKey string) (Plan, error) {
	value, err := json.Marshal(p)
	if err != nil {
		return Plan{}, err
	}
	resp, err := cli.Txn(ctx).If(leading(electionKey),
		clientv3.Compare(clientv3.ModRevision(keys.TieringHead), "=", head.ModRevision),
		clientv3.Compare(clientv3.CreateRevision(keys.TieringPlan), "=", 0)).
		Then(clientv3.OpPut(keys.TieringPlan, string(value))).Commit()
	if err != nil {
		return Plan{}, fmt.Errorf("record the plan: %w", err)
	}
	if !resp.Succeeded {
		return Plan{}, fmt.Errorf("record the plan: %w", errRaced)
	}
	p.ModRevision = resp.Header.Revision
	return p, nil
}

// commitFile moves T to the planned file's end and the head to its
// manifest segment, and removes the plan, in one transaction.
func commitFile(ctx context.Context, cli *clientv3.Client, head Head, p Plan, entry ManifestEntry, electionKey string) (Head, error) {
	next := head
	next.Version, next.T, next.LastManifest = stateVersion, p.End, p.Manifest
	next.Files++
	next.Rows += entry.Rows
	next.Bytes += entry.Bytes
	value, err := json.Marshal(next)
	if err != nil {
		return Head{}, err
	}
	resp, err := cli.Txn(ctx).If(leading(electionKey),
		clientv3.Compare(clientv3.ModRevision(keys.TieringHead), "=", head.ModRevision),
		clientv3.Compare(clientv3.ModRevision(keys.TieringPlan), "=", p.ModRevision)).
		Then(clientv3.OpPut(keys.TieringHead, string(value)), clientv3.OpDelete(keys.TieringPlan)).Commit()
	if err != nil {
		return Head{}, fmt.Errorf("move the archived watermark: %w", err)
	}
	if !resp.Succeeded {
		return Head{}, fmt.Errorf("move the archived watermark: %w", errRaced)
	}
	next.ModRevision = resp.Header.Revision
	return next, nil
}

// startHead creates the head at the log start when there is none: the
// archive begins where the log does. The start is read from etcd in the
// same transaction's compare, not from a reader that may not have loaded
// it yet: retention cannot move it between the read and the head.
func startHead(ctx context.Context, cli *clientv3.Client, electionKey string) (Head, error) {
	resp, err := cli.Get(ctx, keys.LogStart)
	if err != nil {
		return Head{}, fmt.Errorf("read the log start: %w", err)
	}
	var logStart uint64
	var startRevision int64
	if len(resp.Kvs) > 0 {
		if logStart, err = strconv.ParseUint(string(resp.Kvs[0].Value), 10, 64); err != nil {
			return Head{}, fmt.Errorf("log start %q: %w", resp.Kvs[0].Value, err)
		}
		startRevision = resp.Kvs[0].ModRevision
	}
	h := Head{Version: stateVersion, First: logStart, T: logStart}
	value, err := json.Marshal(h)
	if err != nil {
		return Head{}, err
	}
	txn, err := cli.Txn(ctx).If(leading(electionKey), clientv3.Compare(clientv3.CreateRevision(keys.TieringHead), "=", 0),
		clientv3.Compare(clientv3.ModRevision(keys.LogStart), "=", startRevision)).
		Then(clientv3.OpPut(keys.TieringHead, string(value))).Commit()
	if err != nil {
		return Head{}, fmt.Errorf("create the archive's head: %w", err)
	}
	if !txn.Succeeded {
		return Head{}, fmt.Errorf("create the archive's head: %w", errRaced)
	}
	h.ModRevision = txn.Header.Revision
	return h, nil
}
