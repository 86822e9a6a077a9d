package ledger

import (
	"context"
	"encoding/json"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"orderlog/internal/keys"
)

// StoreRegistrationVersion is the version of a WAL store's registration
// record at keys.Store(id): JSON {"version":1,"store":id,"incarnation":n,
// "addr":"host:port"}, put by the store's node and bound to its etcd lease,
// so a stopped store's registration disappears with the lease.
const StoreRegistrationVersion = 1

type storeRegistration struct {
	Version        int    `json:"version"`
	StoreID        string `json:"store"`
	Incarnation    uint64 `json:"incarnation"`
	Address        string `json:"addr"`
	MayHideThrough uint64 `json:"may_hide_through,omitempty"`
}

// EncodeStoreRegistration is the registration record of the store m names.
func EncodeStoreRegistration(m Member) ([]byte, error) {
	return json.Marshal(storeRegistration{Version: StoreRegistrationVersion, StoreID: m.StoreID, Incarnation: m.Incarnation, Address: m.Address,
		MayHideThrough: m.MayHideThrough})
}

// DecodeStoreRegistration reads a registration record: the store, the
// incarnation it serves now, and where to reach it.
func DecodeStoreRegistration(b []byte) (Member, error) {
	var r storeRegistration
	if err := json.Unmarshal(b, &r); err != nil {
		return Member{}, fmt.Errorf("decode store registration: %w", err)
	}
	if r.StoreID == "" {
		return Member{}, fmt.Errorf("decode store registration: no store id")
	}
	return Member{StoreID: r.StoreID, Incarnation: r.Incarnation, Address: r.Address, MayHideThrough: r.MayHideThrough}, nil
}

// LiveStores lists the registered stores, the oldest registration (last
// written: keepalives do not write) first,
// without the registrations another store superseded at their address: a
// wiped or replaced store's old registration lives on until its lease
// expires (seconds, longer while etcd elects), and a ledger created on it
// would find another store there and roll at once, over and over.
// LostMembers takes such a member for lost.
func LiveStores(ctx context.Context, cli *clientv3.Client) ([]Member, error) {
	resp, err := cli.Get(ctx, keys.StoresPrefix, clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByModRevision, clientv3.SortAscend))
	if err != nil {
		return nil, fmt.Errorf("list stores: %w", err)
	}
	members := make([]Member, 0, len(resp.Kvs))
	newest := make(map[string]int, len(resp.Kvs)) // address → index in members of its newest registration
	for _, kv := range resp.Kvs {
		m, err := DecodeStoreRegistration(kv.Value)
		if err != nil {
			return nil, fmt.Errorf("store record %s: %w", kv.Key, err)
		}
		newest[m.Address] = len(members)
		members = append(members, m)
	}
	live := members[:0:0]
	for i, m := range members {
		if newest[m.Address] == i {
			live = append(live, m)
		}
	}
	return live, nil
}
