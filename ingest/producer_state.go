package ingest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"orderlog/ingest/coordinator"
	"orderlog/internal/apierr"
	"orderlog/internal/keys"
)

// advanceFor bounds a roll's advance: the next roll moves the producers
// it misses, and a stale one only names an older ledger.
const advanceFor = 3 * time.Second

// advanceChunk is how many producer records one advance transaction
// compares and writes (etcd's default limit is 128 operations a
// transaction; each record takes two compares and a put).
const advanceChunk = 40

// advanceStates moves the state ledger of the producers a roll's snapshot
// holds to the new ledger (coordinator.StateAdvance), chunk by chunk, each
// chunk one etcd transaction that compares every record's mod revision. A
// chunk that loses a race is done one record at a time. Best effort: a
// record left behind only means a takeover reads from further back.
func (n *Node) advanceStates(a coordinator.StateAdvance, incarnation string) {
	ctx, cancel := context.WithTimeout(context.Background(), advanceFor)
	defer cancel()
	advanced := 0
	for start := 0; start < len(a.Producers); start += advanceChunk {
		chunk := a.Producers[start:min(start+advanceChunk, len(a.Producers))]
		count, err := advanceChunkOnce(ctx, n.etcd, chunk, incarnation, a.Ledger)
		if errors.Is(err, errConflict) {
			count = 0
			for _, p := range chunk {
				if recordStateLedger(ctx, n.etcd, p.Producer, incarnation, p.OwnerGen, a.Ledger) == nil {
					count++
				}
			}
		} else if err != nil {
			n.logger.Warn("ingest: cannot move producers' state ledger forward", "ledger", a.Ledger, "err", err)
			return
		}
		advanced += count
	}
	n.metrics.stateAdvances.Add(float64(advanced))
	n.logger.Debug("ingest: producers' state ledger moved", "ledger", a.Ledger, "producers", advanced, "asked", len(a.Producers))
}

// advanceChunkOnce reads the chunk's records in one transaction and writes
// the ones still owned by incarnation at their generation in another,
// compared on every mod revision read. It returns how many it moved.
func advanceChunkOnce(ctx context.Context, cli *clientv3.Client, chunk []coordinator.OwnedProducer, incarnation string, ledgerID uint64) (int, error) {
	gets := make([]clientv3.Op, len(chunk))
	for i, p := range chunk {
		gets[i] = clientv3.OpGet(keys.Producer(p.Producer))
	}
	read, err := cli.Txn(ctx).Then(gets...).Commit()
	if err != nil {
		return 0, fmt.Errorf("read producers: %w", err)
	}
	cmps := append([]clientv3.Cmp{ownerLive(incarnation)}, ledgerKept(ledgerID)...)
	var puts []clientv3.Op
	for i, p := range chunk {
		kvs := read.Responses[i].GetResponseRange().Kvs
		if len(kvs) == 0 {
			continue
		}
		var rec producerRecord
		if err := json.Unmarshal(kvs[0].Value, &rec); err != nil {
			return 0, fmt.Errorf("decode producer %d: %w", p.Producer, err)
		}
		if rec.Owner != incarnation || rec.Gen != p.OwnerGen || rec.Expired || rec.StateLedger == ledgerID {
			continue // moved on: its new owner records its own state
		}
		rec.StateLedger = ledgerID
		value, err := json.Marshal(rec)
		if err != nil {
			return 0, err
		}
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(keys.Producer(p.Producer)), "=", kvs[0].ModRevision))
		puts = append(puts, clientv3.OpPut(keys.Producer(p.Producer), string(value)))
	}
	if len(puts) == 0 {
		return 0, nil
	}
	txn, err := cli.Txn(ctx).If(cmps...).Then(puts...).Commit()
	if err != nil {
		return 0, fmt.Errorf("move producers' state ledger: %w", err)
	}
	if !txn.Succeeded {
		return 0, errConflict
	}
	return len(puts), nil
}

// ledgerKept compares that a ledger's record exists and retention has
// not marked it for deletion: a producer's state must never be recorded
// in a ledger retention is deleting (its rebuild would fail for good).
// Retention reads the producer records again once its marks are in and
// takes back a mark a record pins (retention.Worker.unmarkPinned), so a
// state recorded between its first read and its marks is kept too.
func ledgerKept(id uint64) []clientv3.Cmp {
	return []clientv3.Cmp{
		clientv3.Compare(clientv3.CreateRevision(keys.Ledger(id)), ">", 0),
		clientv3.Compare(clientv3.CreateRevision(keys.LedgerDeleting(id)), "=", 0),
	}
}

// expireProducer marks the producer's record expired if incarnation still
// owns it at its generation, and tells the machine.
func (n *Node) expireProducer(p coordinator.OwnedProducer, incarnation string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := markExpired(ctx, n.etcd, p, incarnation)
	if err == nil {
		n.metrics.producersExpired.Inc()
		n.logger.Info("ingest: producer expired after being idle", "producer", p.Producer)
	} else {
		err = apierr.New(apierr.Unavailable, "expire producer %d: %v", p.Producer, err)
	}
	n.doFor(incarnation, func() { n.machine.ProducerExpired(p.Producer, p.Session, err) })
}

func markExpired(ctx context.Context, cli *clientv3.Client, p coordinator.OwnedProducer, incarnation string) error {
	for attempt := 0; attempt < 100; attempt++ {
		rec, modRevision, err := getProducer(ctx, cli, p.Producer)
		if err != nil {
			return err
		}
		if rec.Owner != incarnation || rec.Gen != p.OwnerGen {
			return fmt.Errorf("producer %d moved to %s: %w", p.Producer, rec.Owner, errNotOwner)
		}
		// A new generation: a write the old session still has on its way
		// (a roll's state-ledger advance) compares the old one and fails,
		// also after InitProducer starts the producer over at this node.
		rec.Expired, rec.StateLedger, rec.Gen = true, 0, rec.Gen+1
		if err := casProducer(ctx, cli, rec, modRevision); !errors.Is(err, errConflict) {
			return err
		}
	}
	return fmt.Errorf("expire producer %d: %w", p.Producer, errConflict)
}
