package node

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"

	"orderlog/ingest/ledger"
	"orderlog/internal/keys"
	"orderlog/proto/walpb"
)

// storeRecord is a WAL store's registration at keys.Store(id): the
// incarnation it serves and where to reach it.
type storeRecord struct {
	Version     int    `json:"version"`
	StoreID     string `json:"store"`
	Incarnation uint64 `json:"incarnation"`
	Address     string `json:"addr"`
}

// registerStore records the store's current incarnation and address,
// bound to lease so a stopped store disappears from ensemble choices.
func registerStore(ctx context.Context, cli *clientv3.Client, rec storeRecord, lease clientv3.LeaseID) error {
	rec.Version = 1
	value, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	if _, err := cli.Put(ctx, keys.Store(rec.StoreID), string(value), clientv3.WithLease(lease)); err != nil {
		return fmt.Errorf("register store %s: %w", rec.StoreID, err)
	}
	return nil
}

// chooseEnsemble picks w registered stores for a new ledger, preferring
// preferred (the node's own store) and then the others in id order.
func chooseEnsemble(ctx context.Context, cli *clientv3.Client, w int, preferred string) ([]ledger.Member, error) {
	resp, err := cli.Get(ctx, keys.StoresPrefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("list stores: %w", err)
	}
	var members []ledger.Member
	for _, kv := range resp.Kvs {
		var rec storeRecord
		if err := json.Unmarshal(kv.Value, &rec); err != nil {
			return nil, fmt.Errorf("store record %s: %w", kv.Key, err)
		}
		members = append(members, ledger.Member{StoreID: rec.StoreID, Incarnation: rec.Incarnation, Address: rec.Address})
	}
	sort.SliceStable(members, func(i, j int) bool {
		return members[i].StoreID == preferred && members[j].StoreID != preferred
	})
	if len(members) < w {
		return nil, fmt.Errorf("%d stores registered, a ledger needs %d", len(members), w)
	}
	return members[:w], nil
}

// resolvingDialer reaches stores at the address they registered last,
// not the one a ledger's metadata recorded when it was created: a store
// that restarts on another address still serves its ledgers.
type resolvingDialer struct {
	inner ledger.Dialer
	mu    sync.Mutex
	addrs map[string]string // store id → registered address
}

// newResolvingDialer follows the store registrations until ctx ends.
func newResolvingDialer(ctx context.Context, cli *clientv3.Client, inner ledger.Dialer) (*resolvingDialer, error) {
	d := &resolvingDialer{inner: inner, addrs: make(map[string]string)}
	resp, err := cli.Get(ctx, keys.StoresPrefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("list stores: %w", err)
	}
	for _, kv := range resp.Kvs {
		d.note(kv.Value)
	}
	watch := cli.Watch(ctx, keys.StoresPrefix, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
	go func() {
		for w := range watch {
			for _, ev := range w.Events {
				if ev.Type == clientv3.EventTypePut {
					d.note(ev.Kv.Value)
				}
			}
		}
	}()
	return d, nil
}

func (d *resolvingDialer) note(value []byte) {
	var rec storeRecord
	if json.Unmarshal(value, &rec) != nil || rec.StoreID == "" {
		return
	}
	d.mu.Lock()
	d.addrs[rec.StoreID] = rec.Address
	d.mu.Unlock()
}

// Client implements ledger.Dialer.
func (d *resolvingDialer) Client(m ledger.Member) (walpb.WALClient, error) {
	d.mu.Lock()
	if addr, ok := d.addrs[m.StoreID]; ok {
		m.Address = addr
	}
	d.mu.Unlock()
	return d.inner.Client(m)
}

// localFirstDialer reaches the node's own store in process and every other
// store through next.
type localFirstDialer struct {
	storeID string
	local   walpb.WALClient
	next    ledger.Dialer
}

// Client implements ledger.Dialer.
func (d localFirstDialer) Client(m ledger.Member) (walpb.WALClient, error) {
	if m.StoreID == d.storeID {
		return d.local, nil
	}
	return d.next.Client(m)
}
