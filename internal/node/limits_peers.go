package node

import (
	"context"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"orderlog/ingest/ledger"
	"orderlog/internal/keys"
)

// peerAddresses are the IP addresses the cluster's nodes registered in
// etcd: WAL stores (keys.StoresPrefix), ingest nodes (keys.IngestPrefix)
// and sequencer candidates (keys.SeqElection), this node's own among
// them. The connection limit does not count connections from them: the
// gRPC port also serves the nodes' own calls (IngestPeer, Sequencer, WAL),
// and a client sharing a node's address (one host, dev, a NAT) must not be
// able to spend the budget the nodes' reconnects need. A node registered
// on an unspecified address (0.0.0.0, ::, no host) stands for loopback,
// where it reaches itself. A peer that connects from another address than
// it registered (several interfaces) is counted; a node that registers
// nothing (the reader role alone) too. Other loopback addresses are
// counted as any (tests use 127.0.0.2 and up as other clients).
//
// Invariant: ips is rebuilt from byKey under mu after each change, and
// read without a lock by the listeners.
type peerAddresses struct {
	ips atomic.Pointer[map[string]bool]
	mu  struct {
		sync.Mutex
		byKey map[string][]string // registration key → its address's IPs
	}
}

// peerResolveTimeout bounds the DNS lookup of a registered host name.
const peerResolveTimeout = 2 * time.Second

// has reports whether ip is a registered node's.
func (p *peerAddresses) has(ip string) bool {
	parsed := net.ParseIP(ip)
	if parsed == nil || p == nil {
		return false
	}
	ips := p.ips.Load()
	return ips != nil && (*ips)[parsed.String()]
}

// followPeers lists the registrations and follows them until ctx ends;
// until the first listing, no address is exempt.
func followPeers(ctx context.Context, cli *clientv3.Client, wg *sync.WaitGroup) *peerAddresses {
	p := &peerAddresses{}
	p.mu.byKey = map[string][]string{}
	for _, prefix := range []string{keys.StoresPrefix, keys.IngestPrefix, keys.SeqElection + "/"} {
		wg.Go(func() { p.follow(ctx, cli, prefix) }) // Close waits for them
	}
	return p
}

// follow keeps the registrations under prefix: it lists them and
// watches from there, again after a pause when the watch ends (etcd
// unreachable, the revision compacted), until ctx ends.
func (p *peerAddresses) follow(ctx context.Context, cli *clientv3.Client, prefix string) {
	for {
		p.followOnce(ctx, cli, prefix)
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

func (p *peerAddresses) followOnce(ctx context.Context, cli *clientv3.Client, prefix string) {
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return
	}
	listed := map[string]bool{}
	for _, kv := range resp.Kvs {
		listed[string(kv.Key)] = true
		p.note(ctx, string(kv.Key), kv.Value)
	}
	p.forgetUnlisted(prefix, listed)
	// WithRequireLeader: a member cut off from the others ends the watch
	// (and it starts again elsewhere) instead of going quiet.
	watch := cli.Watch(clientv3.WithRequireLeader(ctx), prefix, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
	for w := range watch {
		if w.Err() != nil {
			return
		}
		for _, ev := range w.Events {
			var value []byte // a deleted registration has none
			if ev.Type == clientv3.EventTypePut {
				value = ev.Kv.Value
			}
			p.note(ctx, string(ev.Kv.Key), value)
		}
	}
}

// forgetUnlisted forgets the registrations under prefix a new listing
// no longer holds (deleted while the watch was down).
func (p *peerAddresses) forgetUnlisted(prefix string, listed map[string]bool) {
	p.mu.Lock()
	var gone []string
	for key := range p.mu.byKey {
		if strings.HasPrefix(key, prefix) && !listed[key] {
			gone = append(gone, key)
		}
	}
	p.mu.Unlock()
	for _, key := range gone {
		p.note(context.Background(), key, nil)
	}
}

// note records the IPs of the address registered under key (none: the
// registration is gone).
func (p *peerAddresses) note(ctx context.Context, key string, value []byte) {
	var ips []string
	if value != nil {
		ips = resolvePeer(ctx, registeredAddress(key, value))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(ips) == 0 {
		delete(p.mu.byKey, key)
	} else {
		p.mu.byKey[key] = ips
	}
	set := map[string]bool{}
	for _, list := range p.mu.byKey {
		for _, ip := range list {
			set[ip] = true
		}
	}
	p.ips.Store(&set)
}

// registeredAddress is the host:port a registration holds: a store's is
// encoded, an ingest node's and a sequencer candidate's are the address.
func registeredAddress(key string, value []byte) string {
	if strings.HasPrefix(key, keys.StoresPrefix) {
		rec, err := ledger.DecodeStoreRegistration(value)
		if err != nil {
			return ""
		}
		return rec.Address
	}
	return string(value)
}

// resolvePeer returns the IPs of address's host (none if it does not
// resolve); an unspecified host (0.0.0.0, ::, none) is loopback's.
func resolvePeer(ctx context.Context, address string) []string {
	if address == "" {
		return nil
	}
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		host = address
	}
	if ip := net.ParseIP(host); ip != nil && !ip.IsUnspecified() {
		return []string{ip.String()}
	}
	if ip := net.ParseIP(host); host == "" || ip != nil {
		return []string{"127.0.0.1", "::1"}
	}
	ctx, cancel := context.WithTimeout(ctx, peerResolveTimeout)
	defer cancel()
	addrs, err := net.DefaultResolver.LookupIPAddr(ctx, host)
	if err != nil {
		return nil
	}
	ips := make([]string, len(addrs))
	for i, a := range addrs {
		ips[i] = a.IP.String()
	}
	return ips
}
