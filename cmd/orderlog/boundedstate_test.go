package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"orderlog/ingest/ledger"
	"orderlog/ingest/retention"
	"orderlog/internal/etcdserver"
	"orderlog/internal/keys"
	"orderlog/sequencer"
)

// etcdState is what the bounded-state crash test reads of a dev process's
// etcd: the log start, every ledger record, the deletion marks and the
// producer records (for retention's pins).
type etcdState struct {
	start     uint64
	ledgers   []ledger.Metadata
	deleting  map[uint64]bool
	producers []retention.Producer
	// checkpoint is the newest complete commit-log checkpoint (zero if
	// none); commitLedgers the sequencer's commit ledger list.
	checkpoint    sequencer.CheckpointPointer
	commitLedgers []uint64
}

// readEtcdState reads the state in one etcd revision per key range; the
// dev process may be writing meanwhile (the test tolerates that where it
// reads a live process: it asks again until a condition holds).
func readEtcdState(ctx context.Context, cli *clientv3.Client) (etcdState, error) {
	var st etcdState
	var err error
	if st.start, _, err = retention.ReadStart(ctx, cli); err != nil {
		return st, err
	}
	if st.ledgers, err = ledger.List(ctx, cli, ledger.Filter{}); err != nil {
		return st, err
	}
	if st.deleting, err = retention.Deleting(ctx, cli); err != nil {
		return st, err
	}
	if st.producers, err = readProducerPins(ctx, cli); err != nil {
		return st, err
	}
	return st, readCommitLog(ctx, cli, &st)
}

// readCommitLog reads the sequencer's checkpoint pointer and commit ledger
// list.
func readCommitLog(ctx context.Context, cli *clientv3.Client, st *etcdState) error {
	resp, err := cli.Txn(ctx).Then(clientv3.OpGet(keys.SeqCheckpoint), clientv3.OpGet(keys.SeqCommitLedgers)).Commit()
	if err != nil {
		return err
	}
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
		if err := json.Unmarshal(kvs[0].Value, &st.checkpoint); err != nil {
			return fmt.Errorf("%s: %w", keys.SeqCheckpoint, err)
		}
	}
	if kvs := resp.Responses[1].GetResponseRange().Kvs; len(kvs) > 0 {
		var list struct {
			Ledgers []struct {
				Ledger uint64 `json:"ledger"`
			} `json:"ledgers"`
		}
		if err := json.Unmarshal(kvs[0].Value, &list); err != nil {
			return fmt.Errorf("%s: %w", keys.SeqCommitLedgers, err)
		}
		for _, l := range list.Ledgers {
			st.commitLedgers = append(st.commitLedgers, l.Ledger)
		}
	}
	return nil
}

// readProducerPins reads the producer records' fields retention pins
// ledgers by (package retention's own reader is unexported).
func readProducerPins(ctx context.Context, cli *clientv3.Client) ([]retention.Producer, error) {
	resp, err := cli.Get(ctx, keys.ProducersPrefix, clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	live, err := cli.Get(ctx, keys.IngestPrefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, err
	}
	alive := map[string]bool{}
	for _, kv := range live.Kvs {
		alive[strings.TrimPrefix(string(kv.Key), keys.IngestPrefix)] = true
	}
	var out []retention.Producer
	for _, kv := range resp.Kvs {
		var f struct {
			ID          uint64 `json:"id"`
			Owner       string `json:"owner"`
			StateLedger uint64 `json:"state_ledger"`
			Expired     bool   `json:"expired"`
		}
		if err := json.Unmarshal(kv.Value, &f); err != nil {
			return nil, fmt.Errorf("producer %s: %w", kv.Key, err)
		}
		out = append(out, retention.Producer{ID: f.ID, Owner: f.Owner, StateLedger: f.StateLedger, Expired: f.Expired, OwnerLive: alive[f.Owner]})
	}
	return out, nil
}

// readKilledEtcd reads the etcd state a SIGKILLed dev process left on
// disk, by starting an etcd server of its own on the process's etcd
// directory (the dev process embeds its etcd, so it died with it). This is
// the state at the moment of the kill: etcd fsyncs its WAL before it
// applies a write.
func readKilledEtcd(t *testing.T, dataDir string) etcdState {
	t.Helper()
	server, err := etcdserver.Start(etcdserver.Config{Dir: filepath.Join(dataDir, "etcd"), ClientAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatalf("start etcd on the killed process's data: %v", err)
	}
	defer server.Close()
	cli, err := server.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := readEtcdState(ctx, cli)
	if err != nil {
		t.Fatalf("read the killed process's etcd: %v", err)
	}
	return st
}

// dialEtcd connects to a running dev process's embedded etcd.
func dialEtcd(t *testing.T, addr string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + addr}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	return cli
}

// rolling reports whether some writer had two ledgers open: a roll had
// opened the next ledger and not yet closed the current one.
func (st etcdState) rolling() bool {
	open := map[string]int{}
	for _, m := range st.ledgers {
		if m.State == ledger.StateOpen {
			open[m.WriterIncarnation]++
		}
	}
	for _, n := range open {
		if n >= 2 {
			return true
		}
	}
	return false
}

// undeleted are the ledgers retention should have deleted by now: closed,
// holding offsets all below the log start, and pinned by no producer.
// The caller also sees the pinned ones it excused.
func (st etcdState) undeleted() (undeleted, pinned []uint64) {
	pins := retention.Pins(st.producers, st.ledgers)
	for _, m := range st.ledgers {
		if m.State != ledger.StateClosed || !m.HasOffsets() || m.EndOffset > st.start {
			continue
		}
		if pins[m.ID] {
			pinned = append(pinned, m.ID)
			continue
		}
		undeleted = append(undeleted, m.ID)
	}
	return undeleted, pinned
}

// ledgerIDs are the ids of every ledger record, sorted.
func (st etcdState) ledgerIDs() []uint64 {
	ids := make([]uint64, 0, len(st.ledgers))
	for _, m := range st.ledgers {
		ids = append(ids, m.ID)
	}
	slices.Sort(ids)
	return ids
}

func (st etcdState) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "log start %d, marks %v, checkpoint %+v, commit ledgers %v, ledgers:", st.start, st.deleting, st.checkpoint, st.commitLedgers)
	for _, m := range st.ledgers {
		fmt.Fprintf(&b, "\n  %d writer=%s state=%v offsets=[%d,%d) bytes=%d", m.ID, m.WriterIncarnation, m.State, m.FirstOffset, m.EndOffset, m.Bytes)
	}
	for _, p := range st.producers {
		fmt.Fprintf(&b, "\n  producer %d owner=%s live=%v state_ledger=%d expired=%v", p.ID, p.Owner, p.OwnerLive, p.StateLedger, p.Expired)
	}
	return b.String()
}

// killTrigger is what a kill waits for: nothing (a random moment), a
// deletion mark being created (retention's step 1), one being removed with
// its ledger's record (step 3, the next ledger's steps 2 and 3 follow), a
// roll opening a writer's second ledger, or a checkpoint ledger being
// created (a checkpoint's step 2).
type killTrigger string

const (
	killAtRandom     killTrigger = "random"
	killAtMark       killTrigger = "mark"
	killAtRemoved    killTrigger = "removed"
	killAtRoll       killTrigger = "roll"
	killAtCheckpoint killTrigger = "checkpoint"
)

// waitTrigger returns once the trigger's event was committed in etcd (or
// after timeout: the kill then lands where it lands).
func waitTrigger(ctx context.Context, cli *clientv3.Client, trigger killTrigger, timeout time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	switch trigger {
	case killAtMark, killAtRemoved:
		want := clientv3.EventTypePut
		if trigger == killAtRemoved {
			want = clientv3.EventTypeDelete
		}
		for resp := range cli.Watch(ctx, keys.LedgerDeletingPrefix, clientv3.WithPrefix()) {
			for _, ev := range resp.Events {
				if ev.Type == want {
					return true
				}
			}
		}
	case killAtRoll, killAtCheckpoint:
		for watch := range cli.Watch(ctx, keys.LedgersPrefix, clientv3.WithPrefix()) {
			for _, ev := range watch.Events {
				if ev.Type != clientv3.EventTypePut || ev.Kv.CreateRevision != ev.Kv.ModRevision {
					continue
				}
				if trigger == killAtRoll && secondOpen(ctx, cli, ev.Kv.Value) || trigger == killAtCheckpoint && checkpointLedger(ev.Kv.Value) {
					return true
				}
			}
		}
	}
	return false
}

// checkpointLedger reports whether the ledger record is a checkpoint
// ledger's (see etcdState.checkpointing).
func checkpointLedger(value []byte) bool {
	var created struct {
		Writer string `json:"writer"`
	}
	return json.Unmarshal(value, &created) == nil && strings.HasSuffix(created.Writer, "-checkpoint")
}

// secondOpen reports whether the ledger record just created is open and
// its writer has another ledger open: a roll's next ledger.
func secondOpen(ctx context.Context, cli *clientv3.Client, value []byte) bool {
	var created struct {
		ID     uint64 `json:"id"`
		Writer string `json:"writer"`
	}
	if json.Unmarshal(value, &created) != nil {
		return false
	}
	open, err := ledger.List(ctx, cli, ledger.Filter{})
	if err != nil {
		return false
	}
	for _, m := range open {
		if m.ID != created.ID && m.WriterIncarnation == created.Writer && m.State == ledger.StateOpen {
			return true
		}
	}
	return false
}

// waitRetentionElected waits until the retention election holds one key:
// a killed worker's key stays until its lease expires (5 s, counted again
// from each etcd start), and until then the restarted worker waits.
func waitRetentionElected(t *testing.T, cli *clientv3.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		resp, err := cli.Get(ctx, keys.RetentionElection, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err == nil && resp.Count == 1 {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("the retention election still holds %v keys after 30 s (%v)", resp, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkpointing reports whether a commit-log checkpoint was under way
// (sequencer/checkpoint.go): the commit ledger rolled and the ledgers
// before the new one not yet dropped from the list (steps 1-4), or a
// checkpoint ledger newer than the one the pointer names (steps 2-3). The
// sequencer names its checkpoint ledgers' writer "<writer>-checkpoint"
// (sequencer/checkpoint_ledgers.go).
func (st etcdState) checkpointing() bool {
	if len(st.commitLedgers) > 1 {
		return true
	}
	for _, m := range st.ledgers {
		if strings.HasSuffix(m.WriterIncarnation, "-checkpoint") && m.ID > st.checkpoint.Ledger {
			return true
		}
	}
	return false
}

// commitLogReadable checks that the ledgers a takeover reads exist: the
// one the checkpoint pointer names and the commit ledgers from the
// pointer's FirstKept on (step 4 deletes those before it, then drops them
// from the list).
func (st etcdState) commitLogReadable() error {
	records := map[uint64]bool{}
	for _, m := range st.ledgers {
		records[m.ID] = true
	}
	if st.checkpoint.Ledger != 0 && !records[st.checkpoint.Ledger] {
		return fmt.Errorf("the checkpoint pointer names ledger %d, which has no record", st.checkpoint.Ledger)
	}
	for _, id := range st.commitLedgers {
		if id >= st.checkpoint.FirstKept && !records[id] {
			return fmt.Errorf("the commit ledger list names ledger %d, which has no record", id)
		}
	}
	return nil
}

// retentionCandidates is how many keys the retention election holds (0 if
// it cannot be read).
func retentionCandidates(ctx context.Context, cli *clientv3.Client) int64 {
	resp, err := cli.Get(ctx, keys.RetentionElection, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0
	}
	return resp.Count
}

// strandedCheckpoints are the checkpoint ledgers no reader or takeover
// needs any more (below the oldest one the pointer's index names, and not
// the pointer's own) whose records are still there.
func (st etcdState) strandedCheckpoints() []uint64 {
	var out []uint64
	for _, m := range st.ledgers {
		if strings.HasSuffix(m.WriterIncarnation, "-checkpoint") && m.ID != st.checkpoint.Ledger && m.ID < st.checkpoint.FirstLedger {
			out = append(out, m.ID)
		}
	}
	return out
}
