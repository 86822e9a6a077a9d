package retention

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"orderlog/ingest/ledger"
	"orderlog/internal/keys"
	"orderlog/proto/walpb"
)

// clusterState is what a pass reads from etcd.
type clusterState struct {
	ledgers   []ledger.Metadata
	deleting  map[uint64]bool
	producers []Producer
	// start is the log start; startRevision the key's mod revision (0:
	// never written), compared when it moves.
	start         uint64
	startRevision int64
	retained      Retained
	// checkpointLedger and checkpointFirst are the commit-log checkpoint
	// pointer's ledger and first_ledger (0: none).
	checkpointLedger, checkpointFirst uint64
	// topicStarts are the topics' starts (byte limits), read at
	// topicStartsRevision; topicStartsErr says why they could not be.
	topicStarts         TopicStarts
	topicStartsRevision int64
	topicStartsErr      error
	// noArchive: the pass found no archive (no head) and moves the start
	// uncapped, so the move requires that none began meanwhile.
	noArchive bool
}

// readCheckpointPointer reads the sequencer's checkpoint pointer's ledger
// and first_ledger (the pointer is package sequencer's; its format is in
// docs/format/commit-log.md).
func readCheckpointPointer(ctx context.Context, cli *clientv3.Client) (ledgerID, first uint64, err error) {
	resp, err := cli.Get(ctx, keys.SeqCheckpoint)
	if err != nil || len(resp.Kvs) == 0 {
		return 0, 0, err
	}
	var p struct {
		Ledger      uint64 `json:"ledger"`
		FirstLedger uint64 `json:"first_ledger"`
	}
	if err := json.Unmarshal(resp.Kvs[0].Value, &p); err != nil {
		return 0, 0, fmt.Errorf("checkpoint pointer: %w", err)
	}
	return p.Ledger, p.FirstLedger, nil
}

func readState(ctx context.Context, cli *clientv3.Client) (clusterState, error) {
	var st clusterState
	var err error
	if st.start, st.startRevision, err = ReadStart(ctx, cli); err != nil {
		return st, err
	}
	if st.ledgers, err = ledger.List(ctx, cli, ledger.Filter{}); err != nil {
		return st, err
	}
	if st.deleting, err = readDeleting(ctx, cli); err != nil {
		return st, err
	}
	if st.producers, err = readProducers(ctx, cli); err != nil {
		return st, err
	}
	if st.retained, err = ReadRetained(ctx, cli); err != nil {
		return st, err
	}
	st.topicStarts, st.topicStartsRevision, st.topicStartsErr = ReadTopicStarts(ctx, cli)
	st.checkpointLedger, st.checkpointFirst, err = readCheckpointPointer(ctx, cli)
	return st, err
}

// ReadStart reads the log start and its key's mod revision (0, 0 if never
// written).
func ReadStart(ctx context.Context, cli *clientv3.Client) (uint64, int64, error) {
	resp, err := cli.Get(ctx, keys.LogStart)
	if err != nil {
		return 0, 0, fmt.Errorf("read the log start: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return 0, 0, nil
	}
	start, err := strconv.ParseUint(string(resp.Kvs[0].Value), 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("log start %q: %w", resp.Kvs[0].Value, err)
	}
	return start, resp.Kvs[0].ModRevision, nil
}

// ParseStart decodes the log start key's value (for watchers).
func ParseStart(value []byte) (uint64, error) { return strconv.ParseUint(string(value), 10, 64) }

// errRaced: another worker changed what a compare-and-swap compared; the
// next pass reads again.
var errRaced = errors.New("retention: changed concurrently")

// moveStart writes the new log start and the retained set reaching it in
// one transaction, if both keys are as read and the worker still leads
// (electionKey exists; "" in tests that run passes without an election): a
// deposed worker must not switch to a set its successor already deleted.
func moveStart(ctx context.Context, cli *clientv3.Client, st clusterState, start uint64, set Retained, electionKey string) error {
	value, err := encodeRetained(set)
	if err != nil {
		return err
	}
	cmps := append(leading(electionKey), clientv3.Compare(clientv3.ModRevision(keys.LogStart), "=", st.startRevision),
		clientv3.Compare(clientv3.ModRevision(keys.Retained), "=", st.retained.ModRevision))
	if st.noArchive {
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(keys.TieringHead), "=", 0))
	}
	resp, err := cli.Txn(ctx).If(cmps...).
		Then(clientv3.OpPut(keys.LogStart, strconv.FormatUint(start, 10)), clientv3.OpPut(keys.Retained, value)).Commit()
	if err != nil {
		return fmt.Errorf("move the log start: %w", err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("move the log start: %w", errRaced)
	}
	return nil
}

func readDeleting(ctx context.Context, cli *clientv3.Client) (map[uint64]bool, error) {
	resp, err := cli.Get(ctx, keys.LedgerDeletingPrefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, fmt.Errorf("list ledgers being deleted: %w", err)
	}
	out := make(map[uint64]bool, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		id, err := strconv.ParseUint(strings.TrimPrefix(string(kv.Key), keys.LedgerDeletingPrefix), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("deletion mark %q: %w", kv.Key, err)
		}
		out[id] = true
	}
	return out, nil
}

// Deleting lists the ledgers being deleted (re-replication skips them).
func Deleting(ctx context.Context, cli *clientv3.Client) (map[uint64]bool, error) {
	return readDeleting(ctx, cli)
}

// producerFields are the producer record's fields retention reads (the
// record is package ingest's; unknown fields are kept on a rewrite).
type producerFields struct {
	ID          uint64 `json:"id"`
	Owner       string `json:"owner"`
	StateLedger uint64 `json:"state_ledger"`
	Expired     bool   `json:"expired"`
}

func readProducers(ctx context.Context, cli *clientv3.Client) ([]Producer, error) {
	resp, err := cli.Get(ctx, keys.ProducersPrefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("list producers: %w", err)
	}
	live, err := cli.Get(ctx, keys.IngestPrefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, fmt.Errorf("list ingest nodes: %w", err)
	}
	alive := make(map[string]bool, len(live.Kvs))
	for _, kv := range live.Kvs {
		alive[strings.TrimPrefix(string(kv.Key), keys.IngestPrefix)] = true
	}
	out := make([]Producer, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var f producerFields
		if err := json.Unmarshal(kv.Value, &f); err != nil {
			return nil, fmt.Errorf("decode producer %q: %w", kv.Key, err)
		}
		out = append(out, Producer{ID: f.ID, Owner: f.Owner, StateLedger: f.StateLedger, Expired: f.Expired, OwnerLive: alive[f.Owner],
			ModRevision: kv.ModRevision})
	}
	return out, nil
}

// expireOrphan marks the producer's record expired (as its owner would at
// a roll), if it is still the record the pass judged (its mod revision)
// and its owner is still gone.
func expireOrphan(ctx context.Context, cli *clientv3.Client, p Producer) error {
	id := p.ID
	resp, err := cli.Get(ctx, keys.Producer(id))
	if err != nil || len(resp.Kvs) == 0 {
		return fmt.Errorf("read producer %d: %v", id, err)
	}
	if resp.Kvs[0].ModRevision != p.ModRevision {
		return errRaced
	}
	var record map[string]any
	if err := json.Unmarshal(resp.Kvs[0].Value, &record); err != nil {
		return err
	}
	owner, _ := record["owner"].(string)
	gen, _ := record["gen"].(float64)
	record["expired"], record["state_ledger"], record["gen"] = true, 0, uint64(gen)+1 // as the owner's expiry does
	value, err := json.Marshal(record)
	if err != nil {
		return err
	}
	txn, err := cli.Txn(ctx).If(
		clientv3.Compare(clientv3.ModRevision(keys.Producer(id)), "=", resp.Kvs[0].ModRevision),
		clientv3.Compare(clientv3.CreateRevision(keys.Ingest(owner)), "=", 0),
	).Then(clientv3.OpPut(keys.Producer(id), string(value))).Commit()
	if err != nil {
		return err
	}
	if !txn.Succeeded {
		return errRaced
	}
	return nil
}

// deleteCallTimeout bounds one store's DeleteLedger.
const deleteCallTimeout = 5 * time.Second

func deleteCopy(ctx context.Context, stores ledger.Dialer, member ledger.Member, id uint64) error {
	client, err := stores.Client(member)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, deleteCallTimeout)
	defer cancel()
	_, err = client.DeleteLedger(ctx, &walpb.DeleteLedgerRequest{LedgerId: id})
	return err
}

// leading compares that the worker's election key exists ("" compares
// nothing).
func leading(electionKey string) []clientv3.Cmp {
	if electionKey == "" {
		return nil
	}
	return []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(electionKey), ">", 0)}
}

// mark records that m is being deleted, if its record is unchanged and the
// worker still leads.
func mark(ctx context.Context, cli *clientv3.Client, m ledger.Metadata, electionKey string) error {
	cmps := append(leading(electionKey), clientv3.Compare(clientv3.ModRevision(keys.Ledger(m.ID)), "=", m.ModRevision),
		clientv3.Compare(clientv3.CreateRevision(keys.LedgerDeleting(m.ID)), "=", 0))
	resp, err := cli.Txn(ctx).If(cmps...).Then(clientv3.OpPut(keys.LedgerDeleting(m.ID), "")).Commit()
	if err != nil {
		return fmt.Errorf("mark ledger %d for deletion: %w", m.ID, err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("mark ledger %d for deletion: %w", m.ID, errRaced)
	}
	return nil
}

// unmark takes a deletion mark back (before any copy was deleted).
func unmark(ctx context.Context, cli *clientv3.Client, id uint64) error {
	if _, err := cli.Delete(ctx, keys.LedgerDeleting(id)); err != nil {
		return fmt.Errorf("take ledger %d's deletion mark back: %w", id, err)
	}
	return nil
}

// deleteLedger deletes every member's copy, then the record and its mark
// together, if the record did not change meanwhile (an ensemble change
// re-replication made before it saw the mark: the next pass deletes the
// new member's copy too).
//
// Every member is asked, each call bounded by deleteCallTimeout (a paused
// store must not stall the pass); a member lost for good (its store came
// back empty, or another store holds its address: ledger.LostMembers) has
// no copy to delete.
func deleteLedger(ctx context.Context, cli *clientv3.Client, stores ledger.Dialer, m ledger.Metadata) error {
	registered, err := ledger.LiveStores(ctx, cli)
	if err != nil {
		return err
	}
	lost := ledger.LostMembers(m.Ensemble, registered)
	var errs []error
	for i, member := range m.Ensemble {
		if lost[i] {
			continue
		}
		if err := deleteCopy(ctx, stores, member, m.ID); err != nil {
			errs = append(errs, fmt.Errorf("store %s (%s): %w", member.StoreID, member.Address, err))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("delete ledger %d: %w", m.ID, errors.Join(errs...))
	}
	resp, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(keys.Ledger(m.ID)), "=", m.ModRevision)).
		Then(clientv3.OpDelete(keys.Ledger(m.ID)), clientv3.OpDelete(keys.LedgerDeleting(m.ID))).Commit()
	if err != nil {
		return fmt.Errorf("remove ledger %d's record: %w", m.ID, err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("remove ledger %d's record: %w", m.ID, errRaced)
	}
	return nil
}
