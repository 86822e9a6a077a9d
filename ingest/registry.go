package ingest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	clientv3 "go.etcd.io/etcd/client/v3"

	"orderlog/internal/keys"
)

// producerRecord is the etcd record of one producer at keys.Producer(id).
// Every change is a compare-and-swap on the record's mod revision.
type producerRecord struct {
	Version int    `json:"version"`
	ID      uint64 `json:"id"`
	Name    string `json:"name"`
	// Epoch is bumped by every InitProducer; frames of older epochs are fenced.
	Epoch uint64 `json:"epoch"`
	// Owner is the ingest incarnation that appends for the producer.
	Owner string `json:"owner"`
	// Gen counts ownership changes.
	Gen uint64 `json:"gen"`
	// StateLedger is the ledger holding the producer's latest state
	// snapshot; its state is rebuilt from there and the same writer's later
	// ledgers. 0: the producer has no history yet.
	StateLedger uint64 `json:"state_ledger,omitempty"`
	// Expired: the owner dropped the producer's state after it was idle
	// past the expiry (producer_state.go). A takeover refuses it with
	// PRODUCER_EXPIRED; the next InitProducer starts it over at seq 0.
	Expired bool `json:"expired,omitempty"`
	// Principal is the authenticated principal the producer is bound to
	// (empty: made while authentication was off; the first authenticated
	// InitProducer binds it). Another principal's InitProducer is refused
	// before the epoch moves, so it cannot fence the producer.
	Principal string `json:"principal,omitempty"`
}

// errOtherPrincipal refuses an InitProducer by a principal the producer is
// not bound to.
var errOtherPrincipal = errors.New("ingest: the producer is bound to another principal")

const producerRecordVersion = 1

// errConflict means a compare-and-swap lost a race; the caller retries.
var errConflict = errors.New("ingest: concurrent change, retry")

// registerProducer bumps the epoch of the producer called name (creating it
// with epoch 1 and owner as its owner if new). A live owner stays the owner:
// owner's takeover then takes the producer from it by a Release, or by
// fencing it (DESIGN.md §6). An owner whose liveness key is gone has nothing
// to hand over, and owner becomes the owner at once. It returns the new
// record and the previous one (zero if new).
func registerProducer(ctx context.Context, cli *clientv3.Client, name, owner string) (producerRecord, producerRecord, error) {
	return registerProducerAs(ctx, cli, name, owner, "")
}

// registerProducerAs is registerProducer for an authenticated principal
// ("" when authentication is off): a new producer is bound to it, an
// unbound one gets bound, and one bound to another principal is refused
// with errOtherPrincipal, its record unchanged.
func registerProducerAs(ctx context.Context, cli *clientv3.Client, name, owner, principal string) (producerRecord, producerRecord, error) {
	for attempt := 0; attempt < 100; attempt++ {
		next, previous, err := tryRegisterProducer(ctx, cli, name, owner, principal)
		if !errors.Is(err, errConflict) {
			return next, previous, err
		}
	}
	return producerRecord{}, producerRecord{}, fmt.Errorf("register producer %q: %w", name, errConflict)
}

func tryRegisterProducer(ctx context.Context, cli *clientv3.Client, name, owner, principal string) (producerRecord, producerRecord, error) {
	resp, err := cli.Get(ctx, keys.ProducerName(name))
	if err != nil {
		return producerRecord{}, producerRecord{}, fmt.Errorf("read producer name: %w", err)
	}
	if len(resp.Kvs) == 0 {
		rec, err := createProducer(ctx, cli, name, owner, principal)
		return rec, producerRecord{}, err
	}
	id, err := strconv.ParseUint(string(resp.Kvs[0].Value), 10, 64)
	if err != nil {
		return producerRecord{}, producerRecord{}, fmt.Errorf("producer name %q maps to %q: %w", name, resp.Kvs[0].Value, err)
	}
	previous, modRevision, err := getProducer(ctx, cli, id)
	if err != nil {
		return producerRecord{}, producerRecord{}, err
	}
	if principal != "" && previous.Principal != "" && previous.Principal != principal {
		return producerRecord{}, producerRecord{}, errOtherPrincipal
	}
	next := previous
	if principal != "" {
		next.Principal = principal
	}
	next.Epoch++
	if next.Expired { // its state is gone: it starts over
		next.Expired, next.StateLedger = false, 0
	}
	err = casProducer(ctx, cli, next, modRevision, owner)
	if errors.Is(err, errNotLive) && next.Owner != owner {
		next.Owner = owner
		next.Gen++
		err = casProducer(ctx, cli, next, modRevision)
	}
	if err != nil {
		return producerRecord{}, producerRecord{}, err
	}
	return next, previous, nil
}

func createProducer(ctx context.Context, cli *clientv3.Client, name, owner, principal string) (producerRecord, error) {
	counter, err := cli.Get(ctx, keys.ProducerIDCounter)
	if err != nil {
		return producerRecord{}, fmt.Errorf("read producer id counter: %w", err)
	}
	var last uint64
	var counterRevision int64
	if len(counter.Kvs) > 0 {
		if last, err = strconv.ParseUint(string(counter.Kvs[0].Value), 10, 64); err != nil {
			return producerRecord{}, fmt.Errorf("producer id counter %q: %w", counter.Kvs[0].Value, err)
		}
		counterRevision = counter.Kvs[0].ModRevision
	}
	rec := producerRecord{Version: producerRecordVersion, ID: last + 1, Name: name, Epoch: 1, Owner: owner, Gen: 1, Principal: principal}
	value, err := json.Marshal(rec)
	if err != nil {
		return producerRecord{}, err
	}
	txn, err := cli.Txn(ctx).If(
		clientv3.Compare(clientv3.ModRevision(keys.ProducerIDCounter), "=", counterRevision),
		clientv3.Compare(clientv3.CreateRevision(keys.ProducerName(name)), "=", 0),
		ownerLive(owner),
	).Then(
		clientv3.OpPut(keys.ProducerIDCounter, strconv.FormatUint(rec.ID, 10)),
		clientv3.OpPut(keys.ProducerName(name), strconv.FormatUint(rec.ID, 10)),
		clientv3.OpPut(keys.Producer(rec.ID), string(value)),
	).Commit()
	if err != nil {
		return producerRecord{}, fmt.Errorf("create producer: %w", err)
	}
	if !txn.Succeeded {
		return producerRecord{}, conflictOrNotLive(ctx, cli, owner)
	}
	return rec, nil
}

func getProducer(ctx context.Context, cli *clientv3.Client, id uint64) (producerRecord, int64, error) {
	resp, err := cli.Get(ctx, keys.Producer(id))
	if err != nil {
		return producerRecord{}, 0, fmt.Errorf("read producer %d: %w", id, err)
	}
	if len(resp.Kvs) == 0 {
		return producerRecord{}, 0, fmt.Errorf("producer %d: %w", id, errUnknownProducer)
	}
	var rec producerRecord
	if err := json.Unmarshal(resp.Kvs[0].Value, &rec); err != nil {
		return producerRecord{}, 0, fmt.Errorf("decode producer %d: %w", id, err)
	}
	return rec, resp.Kvs[0].ModRevision, nil
}

// casProducer stores rec if the record is still at modRevision and its
// owner (and the incarnation caller, if given) is live.
func casProducer(ctx context.Context, cli *clientv3.Client, rec producerRecord, modRevision int64, caller ...string) error {
	return casProducerIf(ctx, cli, rec, modRevision, nil, caller...)
}

// casProducerIf is casProducer with more compares.
func casProducerIf(ctx context.Context, cli *clientv3.Client, rec producerRecord, modRevision int64, extra []clientv3.Cmp, caller ...string) error {
	value, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	cmps := append([]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(keys.Producer(rec.ID)), "=", modRevision), ownerLive(rec.Owner)}, extra...)
	for _, c := range caller {
		cmps = append(cmps, ownerLive(c))
	}
	txn, err := cli.Txn(ctx).If(cmps...).Then(clientv3.OpPut(keys.Producer(rec.ID), string(value))).Commit()
	if err != nil {
		return fmt.Errorf("update producer %d: %w", rec.ID, err)
	}
	if !txn.Succeeded {
		return conflictOrNotLive(ctx, cli, append([]string{rec.Owner}, caller...)...)
	}
	return nil
}

// ownerLive compares that an owner incarnation's liveness key exists: a
// producer record can name only a live owner. An incarnation whose lease
// was revoked (another node took one of its producers over) may not have
// noticed yet; it must not take or keep producers meanwhile, or it would
// serve them from sessions the new owner has moved past.
func ownerLive(owner string) clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(keys.Ingest(owner)), ">", 0)
}

// conflictOrNotLive tells a failed compare-and-swap's two causes apart.
func conflictOrNotLive(ctx context.Context, cli *clientv3.Client, owners ...string) error {
	for _, owner := range owners {
		resp, err := cli.Get(ctx, keys.Ingest(owner), clientv3.WithKeysOnly())
		switch {
		case err != nil:
			return fmt.Errorf("check the liveness of %s: %w", owner, err)
		case len(resp.Kvs) == 0:
			return fmt.Errorf("%s: %w", owner, errNotLive)
		}
	}
	return errConflict
}

// takeOwnership makes owner the owner of producer id (gen+1, same epoch) if
// epoch is still the producer's epoch. It returns the record now stored and
// the owner before.
func takeOwnership(ctx context.Context, cli *clientv3.Client, id, epoch uint64, owner string) (rec producerRecord, previousOwner string, err error) {
	for attempt := 0; attempt < 100; attempt++ {
		rec, modRevision, err := getProducer(ctx, cli, id)
		if err != nil {
			return producerRecord{}, "", err
		}
		previousOwner = rec.Owner
		if rec.Epoch != epoch || rec.Owner == owner || rec.Expired {
			return rec, previousOwner, nil // the caller compares the epoch and expiry
		}
		rec.Owner = owner
		rec.Gen++
		if err := casProducer(ctx, cli, rec, modRevision); !errors.Is(err, errConflict) {
			return rec, previousOwner, err
		}
	}
	return producerRecord{}, "", fmt.Errorf("take producer %d: %w", id, errConflict)
}

// recordStateLedger notes that ledger holds a confirmed snapshot of the
// producer's state, written by owner. It fails if owner no longer owns it.
func recordStateLedger(ctx context.Context, cli *clientv3.Client, id uint64, owner string, ownerGen, ledgerID uint64) error {
	for attempt := 0; attempt < 100; attempt++ {
		rec, modRevision, err := getProducer(ctx, cli, id)
		if err != nil {
			return err
		}
		if rec.Owner != owner || rec.Gen != ownerGen {
			// A different owner, or this one again after the producer left
			// it: the session that asked has been given up.
			return fmt.Errorf("producer %d moved to %s (generation %d, asked for %d): %w", id, rec.Owner, rec.Gen, ownerGen, errNotOwner)
		}
		// Equal, not ≥: ledger ids come from one counter shared by all
		// writers, and a new owner's open ledger may be older than the one
		// the previous owner recorded. Skipping it left the record pointing
		// at the old owner's ledgers, and a rebuild missed everything the
		// new owner logged. (A lower id of the same writer is harmless: a
		// rebuild scans all of its ledgers from there.)
		if rec.StateLedger == ledgerID {
			return nil
		}
		rec.StateLedger = ledgerID
		if err := casProducerIf(ctx, cli, rec, modRevision, ledgerKept(ledgerID)); !errors.Is(err, errConflict) {
			return err
		}
	}
	return fmt.Errorf("producer %d state ledger: %w", id, errConflict)
}

// errNotLive: the incarnation's liveness key is gone (its lease expired or
// was revoked); it can own no producer.
var errNotLive = errors.New("ingest: incarnation's etcd lease is gone")

// errNotOwner: this node no longer owns the producer.
var errNotOwner = errors.New("ingest: producer owned elsewhere")

// errUnknownProducer: no record for a producer id.
var errUnknownProducer = errors.New("ingest: unknown producer")
