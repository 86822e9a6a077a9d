package sequencer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"orderlog/internal/keys"
)

// ErrDeposed is returned when an etcd write comparing seq/epoch fails: a
// newer leader exists.
var ErrDeposed = errors.New("sequencer: deposed by a newer epoch")

// epochStore does one leader's etcd writes; every one compares seq/epoch
// with the leader's epoch (the first one compares its election key).
type epochStore struct {
	cli         *clientv3.Client
	epoch       uint64
	electionKey string
}

func (s *epochStore) epochIs() clientv3.Cmp {
	return clientv3.Compare(clientv3.Value(keys.SeqEpoch), "=", strconv.FormatUint(s.epoch, 10))
}

// writeEpoch is step 1 of §5: seq/epoch = E under the election key.
func (s *epochStore) writeEpoch(ctx context.Context) error {
	resp, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(s.electionKey), "=", int64(s.epoch))).
		Then(clientv3.OpPut(keys.SeqEpoch, strconv.FormatUint(s.epoch, 10))).
		Commit()
	if err != nil {
		return fmt.Errorf("write epoch: %w", err)
	}
	if !resp.Succeeded {
		return ErrDeposed
	}
	return nil
}

// readReserved reads R, creating it as 0 on a fresh cluster.
func (s *epochStore) readReserved(ctx context.Context) (uint64, error) {
	resp, err := s.cli.Txn(ctx).If(s.epochIs()).
		Then(clientv3.OpGet(keys.SeqReserved)).Commit()
	if err != nil {
		return 0, fmt.Errorf("read reserved: %w", err)
	}
	if !resp.Succeeded {
		return 0, ErrDeposed
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 1 {
		return strconv.ParseUint(string(kvs[0].Value), 10, 64)
	}
	put, err := s.cli.Txn(ctx).
		If(s.epochIs(), clientv3.Compare(clientv3.Version(keys.SeqReserved), "=", 0)).
		Then(clientv3.OpPut(keys.SeqReserved, "0")).Commit()
	if err != nil {
		return 0, fmt.Errorf("init reserved: %w", err)
	}
	if !put.Succeeded {
		return 0, ErrDeposed
	}
	return 0, nil
}

// extend CASes seq/reserved from expect to next. ErrDeposed means the epoch
// changed; any other failure may be retried.
func (s *epochStore) extend(ctx context.Context, expect, next uint64) error {
	resp, err := s.cli.Txn(ctx).
		If(s.epochIs(), clientv3.Compare(clientv3.Value(keys.SeqReserved), "=", strconv.FormatUint(expect, 10))).
		Then(clientv3.OpPut(keys.SeqReserved, strconv.FormatUint(next, 10))).
		Else(clientv3.OpGet(keys.SeqEpoch), clientv3.OpGet(keys.SeqReserved)).Commit()
	if err != nil {
		return fmt.Errorf("extend reservation: %w", err)
	}
	if resp.Succeeded {
		return nil
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) != 1 || string(kvs[0].Value) != strconv.FormatUint(s.epoch, 10) {
		return ErrDeposed
	}
	// Our epoch, but not the value we expected. Above it, it is an earlier
	// extension of ours whose answer was lost (a timeout after etcd applied
	// it): only this epoch writes seq/reserved now, and it is durable.
	if kvs := resp.Responses[1].GetResponseRange().Kvs; len(kvs) == 1 {
		if current, err := strconv.ParseUint(string(kvs[0].Value), 10, 64); err == nil && current > expect {
			return &reservedAheadError{current: current}
		}
	}
	return fmt.Errorf("extend reservation: seq/reserved is not %d", expect)
}

// reservedAheadError: seq/reserved is already current, above the value an
// extension expected, and was written by this epoch.
type reservedAheadError struct{ current uint64 }

func (e *reservedAheadError) Error() string {
	return fmt.Sprintf("extend reservation: seq/reserved is already %d", e.current)
}

// commitLedgerList is the value of keys.SeqCommitLedgers
// (docs/format/commit-log.md).
type commitLedgerList struct {
	Version int                `json:"version"`
	Ledgers []commitLedgerInfo `json:"ledgers"`
}

// ids returns the list's ledger ids in order.
func (l commitLedgerList) ids() []uint64 {
	ids := make([]uint64, len(l.Ledgers))
	for i, cl := range l.Ledgers {
		ids[i] = cl.Ledger
	}
	return ids
}

type commitLedgerInfo struct {
	Epoch  uint64 `json:"epoch"`
	Ledger uint64 `json:"ledger"`
}

func (s *epochStore) commitLedgers(ctx context.Context) (commitLedgerList, int64, error) {
	resp, err := s.cli.Get(ctx, keys.SeqCommitLedgers)
	if err != nil {
		return commitLedgerList{}, 0, fmt.Errorf("read commit ledgers: %w", err)
	}
	return decodeList(resp.Kvs)
}

// mvccKV is an etcd key-value as a range read returns it.
type mvccKV = mvccpb.KeyValue

func decodeList(kvs []*mvccKV) (commitLedgerList, int64, error) {
	list := commitLedgerList{Version: 1}
	if len(kvs) == 0 {
		return list, 0, nil
	}
	if err := json.Unmarshal(kvs[0].Value, &list); err != nil || list.Version != 1 {
		return list, 0, fmt.Errorf("decode %s (version %d): %v", keys.SeqCommitLedgers, list.Version, err)
	}
	return list, kvs[0].ModRevision, nil
}

// addCommitLedger appends a commit ledger of this epoch to the list, and
// returns the list and its new revision.
func (s *epochStore) addCommitLedger(ctx context.Context, list commitLedgerList, modRev int64, id uint64) (commitLedgerList, int64, error) {
	list.Ledgers = append(slices.Clip(list.Ledgers), commitLedgerInfo{Epoch: s.epoch, Ledger: id})
	b, err := json.Marshal(list)
	if err != nil {
		return list, 0, err
	}
	resp, err := s.cli.Txn(ctx).
		If(s.epochIs(), clientv3.Compare(clientv3.ModRevision(keys.SeqCommitLedgers), "=", modRev)).
		Then(clientv3.OpPut(keys.SeqCommitLedgers, string(b))).Commit()
	if err != nil {
		return list, 0, fmt.Errorf("record commit ledger: %w", err)
	}
	if !resp.Succeeded {
		return list, 0, ErrDeposed
	}
	return list, resp.Header.Revision, nil
}
