package sequencer

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	clientv3 "go.etcd.io/etcd/client/v3"

	"orderlog/internal/keys"
)

// CheckpointPointer is the value of keys.SeqCheckpoint: the newest
// complete checkpoint (docs/format/commit-log.md §5). It is switched by a
// compare-and-swap only after its ledger is closed, so it never names a
// ledger that lacks an entry; the commit ledgers it replaces leave
// seq/commit-ledgers only after it is switched.
type CheckpointPointer struct {
	Version int `json:"version"`
	// Ledger is the checkpoint ledger; StateEntry and IndexEntry its last
	// two entries.
	Ledger     uint64 `json:"ledger"`
	StateEntry int64  `json:"state_entry"`
	IndexEntry int64  `json:"index_entry"`
	// Start and End: the chunks tile [Start, End); C is the replay's C.
	Start uint64 `json:"start"`
	End   uint64 `json:"end"`
	C     uint64 `json:"c"`
	// Epoch is the leader that wrote it.
	Epoch uint64 `json:"epoch"`
	// FirstKept is the commit ledger the log goes on with: the replay of
	// the list from it on, on top of the state entry, is the whole log's.
	FirstKept uint64 `json:"first_kept"`
	// FirstLedger is the oldest checkpoint ledger the index names (0:
	// none): a checkpoint ledger below it, other than Ledger, holds
	// nothing any reader needs (retention may delete it).
	FirstLedger uint64 `json:"first_ledger,omitempty"`
	// WrittenAt is when it was written (Unix milliseconds; 0 in pointers
	// written before it existed): a new leader's next checkpoint is due an
	// Interval after it, not an Interval after the takeover (a leader that
	// changed more often than that never wrote one).
	WrittenAt int64 `json:"written_at,omitempty"`
}

// IsZero says whether p names no checkpoint (none was ever written).
func (p CheckpointPointer) IsZero() bool { return p.Ledger == 0 }

// ReadCheckpoint returns the newest checkpoint's pointer (zero when there
// is none). Readers load the checkpoint from its ledger with it.
func ReadCheckpoint(ctx context.Context, cli *clientv3.Client) (CheckpointPointer, error) {
	resp, err := cli.Get(ctx, keys.SeqCheckpoint)
	if err != nil {
		return CheckpointPointer{}, fmt.Errorf("read checkpoint pointer: %w", err)
	}
	p, _, err := decodePointer(resp.Kvs)
	return p, err
}

func decodePointer(kvs []*mvccKV) (CheckpointPointer, int64, error) {
	if len(kvs) == 0 {
		return CheckpointPointer{}, 0, nil
	}
	var p CheckpointPointer
	if err := json.Unmarshal(kvs[0].Value, &p); err != nil || p.Version != 1 {
		return p, 0, fmt.Errorf("decode %s (version %d): %v", keys.SeqCheckpoint, p.Version, err)
	}
	return p, kvs[0].ModRevision, nil
}

// commitLogHead is the checkpoint pointer and the commit-ledger list, read
// at one etcd revision, each with its mod revision (0: absent).
type commitLogHead struct {
	pointer    CheckpointPointer
	pointerRev int64
	list       commitLedgerList
	listRev    int64
}

// kept is the part of the list the checkpoint does not replace: from
// FirstKept on (all of it without a checkpoint).
func (h commitLogHead) kept() (commitLedgerList, error) {
	if h.pointer.IsZero() {
		return h.list, nil
	}
	i := slices.IndexFunc(h.list.Ledgers, func(c commitLedgerInfo) bool { return c.Ledger == h.pointer.FirstKept })
	if i < 0 {
		return commitLedgerList{}, fmt.Errorf("sequencer: checkpoint %d goes on with commit ledger %d, which %s does not list",
			h.pointer.Ledger, h.pointer.FirstKept, keys.SeqCommitLedgers)
	}
	return commitLedgerList{Version: h.list.Version, Ledgers: slices.Clone(h.list.Ledgers[i:])}, nil
}

// readHead reads the pointer and the list in one transaction, so a
// checkpoint switched between two reads cannot pair a pointer with a list
// it does not belong to.
func readHead(ctx context.Context, cli *clientv3.Client) (commitLogHead, error) {
	resp, err := cli.Txn(ctx).Then(clientv3.OpGet(keys.SeqCheckpoint), clientv3.OpGet(keys.SeqCommitLedgers)).Commit()
	if err != nil {
		return commitLogHead{}, fmt.Errorf("read commit log head: %w", err)
	}
	var h commitLogHead
	if h.pointer, h.pointerRev, err = decodePointer(resp.Responses[0].GetResponseRange().Kvs); err != nil {
		return h, err
	}
	if h.list, h.listRev, err = decodeList(resp.Responses[1].GetResponseRange().Kvs); err != nil {
		return h, err
	}
	return h, nil
}

// switchCheckpoint CASes the pointer from the one read at prevRev (0: none)
// to p, comparing the epoch; it returns the new mod revision.
func (s *epochStore) switchCheckpoint(ctx context.Context, prevRev int64, p CheckpointPointer) (int64, error) {
	b, err := json.Marshal(p)
	if err != nil {
		return 0, err
	}
	resp, err := s.cli.Txn(ctx).
		If(s.epochIs(), clientv3.Compare(clientv3.ModRevision(keys.SeqCheckpoint), "=", prevRev)).
		Then(clientv3.OpPut(keys.SeqCheckpoint, string(b))).Commit()
	if err != nil {
		return 0, fmt.Errorf("switch checkpoint: %w", err)
	}
	if !resp.Succeeded {
		return 0, ErrDeposed
	}
	return resp.Header.Revision, nil
}

// truncateCommitLedgers drops the list's ledgers before firstKept by CAS
// (epoch and the list's revision) and returns the list and its revision.
func (s *epochStore) truncateCommitLedgers(ctx context.Context, list commitLedgerList, modRev int64, firstKept uint64) (commitLedgerList, int64, error) {
	i := slices.IndexFunc(list.Ledgers, func(c commitLedgerInfo) bool { return c.Ledger == firstKept })
	if i <= 0 {
		return list, modRev, nil // nothing before it (or not listed: leave the list alone)
	}
	next := commitLedgerList{Version: 1, Ledgers: slices.Clone(list.Ledgers[i:])}
	b, err := json.Marshal(next)
	if err != nil {
		return list, modRev, err
	}
	resp, err := s.cli.Txn(ctx).
		If(s.epochIs(), clientv3.Compare(clientv3.ModRevision(keys.SeqCommitLedgers), "=", modRev)).
		Then(clientv3.OpPut(keys.SeqCommitLedgers, string(b))).Commit()
	if err != nil {
		return list, modRev, fmt.Errorf("truncate commit ledgers: %w", err)
	}
	if !resp.Succeeded {
		return list, modRev, ErrDeposed
	}
	return next, resp.Header.Revision, nil
}
