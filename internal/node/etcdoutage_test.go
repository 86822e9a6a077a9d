package node

import (
	"context"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"orderlog/internal/etcdserver"
	"orderlog/internal/event"
)

// Helpers that make etcd lose the leases of running nodes.
//
// Two ways, both on a real embedded etcd:
//   - revokeLeaseOf revokes the lease a key is bound to (a store's
//     registration, an ingest node's liveness key, a sequencer's election
//     key): the key is gone at once, the holder's keepalive ends;
//   - etcdOutage stops the etcd server, waits until the nodes noticed
//     their leases are lost (their keepalive got no answer for the lease's
//     TTL), and starts it again on the same data directory and port, as a
//     quorum loss and return does. Keys survive the restart; the leases
//     their holders gave up expire a TTL after it.

// revokeLeaseOf revokes the lease key is bound to and returns its id.
func revokeLeaseOf(t *testing.T, cli *clientv3.Client, key string) clientv3.LeaseID {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 || resp.Kvs[0].Lease == 0 {
		t.Fatalf("%s: no key bound to a lease (%v)", key, resp.Kvs)
	}
	lease := clientv3.LeaseID(resp.Kvs[0].Lease)
	if _, err := cli.Revoke(ctx, lease); err != nil {
		t.Fatalf("revoke the lease of %s: %v", key, err)
	}
	return lease
}

// leaseOf returns the lease key is bound to (0: none, or no key).
func leaseOf(t *testing.T, cli *clientv3.Client, key string) clientv3.LeaseID {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return 0
	}
	return clientv3.LeaseID(resp.Kvs[0].Lease)
}

// etcdOutage stops etcd, waits until lost() reports true (polled every
// 20 ms: typically "the nodes noticed their leases are lost"), runs during
// (if not nil) while etcd is still down, and restarts etcd. It fails the
// test if lost() is not true within 30 s.
func etcdOutage(t *testing.T, etcd *etcdserver.Server, lost func() bool, during func()) {
	t.Helper()
	etcd.Stop()
	deadline := time.Now().Add(30 * time.Second)
	for !lost() {
		if time.Now().After(deadline) {
			if err := etcd.Restart(); err != nil {
				t.Error(err)
			}
			t.Fatal("etcd outage: the nodes did not notice their leases are lost within 30 s")
		}
		time.Sleep(20 * time.Millisecond) // polling, not an assertion
	}
	if during != nil {
		during()
	}
	if err := etcd.Restart(); err != nil {
		t.Fatal(err)
	}
}

// leaseLosses records the LeaseLost events of a node by holder.
type leaseLosses struct {
	mu   sync.Mutex
	lost map[string]int
}

// listener returns the listener to put in Config.Events.
func (l *leaseLosses) listener() event.Listener {
	return event.Listener{LeaseLost: func(i event.LeaseInfo) {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.lost == nil {
			l.lost = make(map[string]int)
		}
		l.lost[i.Holder]++
	}}
}

// count is how many times holder's lease was lost.
func (l *leaseLosses) count(holder string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lost[holder]
}

// waitFor polls cond every 20 ms until it holds, failing the test with
// what after timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond) // polling, not an assertion
	}
}
