package node

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"orderlog/ingest/ledger"
	"orderlog/internal/keys"
	"orderlog/proto/walpb"
	"orderlog/sequencer"
)

// storeRecord is a WAL store's registration at keys.Store(id): the
// incarnation it serves and where to reach it. Its encoding is
// ledger.EncodeStoreRegistration's; the tags let this package decode it too.
type storeRecord struct {
	Version     int    `json:"version"`
	StoreID     string `json:"store"`
	Incarnation uint64 `json:"incarnation"`
	Address     string `json:"addr"`
	// MayHideThrough: the journal was damaged and may hide records of
	// ledgers up to this id (0: none; ledger.DamagedMember).
	MayHideThrough uint64 `json:"may_hide_through,omitempty"`
}

// registerStore records the store's current incarnation and address,
// bound to lease so a stopped store disappears from ensemble choices.
func registerStore(ctx context.Context, cli *clientv3.Client, rec storeRecord, lease clientv3.LeaseID) error {
	value, err := ledger.EncodeStoreRegistration(ledger.Member{StoreID: rec.StoreID, Incarnation: rec.Incarnation, Address: rec.Address,
		MayHideThrough: rec.MayHideThrough})
	if err != nil {
		return err
	}
	if _, err := cli.Put(ctx, keys.Store(rec.StoreID), string(value), clientv3.WithLease(lease)); err != nil {
		return fmt.Errorf("register store %s: %w", rec.StoreID, err)
	}
	return nil
}

// chooseEnsemble picks up to w registered stores for a new ledger of an
// ingest node: preferred (the node's own store) first, the others in a
// random order, so that ledgers spread over the stores instead of always
// landing on the first w. With fewer than w registered it returns them
// all (a degraded ensemble); ledger.Create refuses fewer than A.
func chooseEnsemble(ctx context.Context, cli *clientv3.Client, w int, preferred string) ([]ledger.Member, error) {
	return chooseLiveEnsemble(ctx, cli, w, 1, preferred)
}

// chooseLiveEnsemble is chooseEnsemble that fails when fewer than a
// stores are registered.
func chooseLiveEnsemble(ctx context.Context, cli *clientv3.Client, w, a int, preferred string) ([]ledger.Member, error) {
	members, err := ledger.LiveStores(ctx, cli)
	if err != nil {
		return nil, err
	}
	if len(members) < max(a, 1) {
		return nil, fmt.Errorf("%d stores registered, a ledger needs at least A=%d (W=%d)", len(members), a, w)
	}
	return spreadEnsemble(members, w, preferred, rand.Perm), nil
}

// spreadEnsemble puts preferred first and the other members in the order
// perm gives, and keeps at most w.
func spreadEnsemble(members []ledger.Member, w int, preferred string, perm func(n int) []int) []ledger.Member {
	var out, others []ledger.Member
	for _, m := range members {
		if m.StoreID == preferred {
			out = append(out, m)
		} else {
			others = append(others, m)
		}
	}
	for _, i := range perm(len(others)) {
		out = append(out, others[i])
	}
	return out[:min(w, len(out))]
}

// runSequencer campaigns for sequencer leadership once at least A stores
// are registered (fewer than W makes the commit ledger degraded: every ack
// still on A copies). Until then it says why in /readyz and in the log.
// Each commit ledger's ensemble is chosen from the stores live when it is
// created, not once when the process starts.
func (s *Server) runSequencer(ctx context.Context, control *sequencer.LedgerClient, preferred string) {
	defer close(s.done)
	commit := s.cfg.Commit
	control.Replication.W = commit.W
	control.Replication.Choose = func(ctx context.Context) ([]ledger.Member, error) {
		return chooseLiveEnsemble(ctx, s.cli, commit.W, commit.A, preferred)
	}
	logged := ""
	for ctx.Err() == nil {
		_, err := control.Replication.Choose(ctx)
		if err == nil {
			s.sequencerWait.Store(nil)
			if logged != "" {
				s.logger.Info("sequencer: enough stores for a commit ledger, campaigning")
			}
			_ = s.sequencer.Run(ctx)
			return
		}
		s.sequencerWait.Store(&err)
		if err.Error() != logged && ctx.Err() == nil {
			logged = err.Error()
			s.logger.Warn("sequencer: not campaigning: too few stores for a commit ledger", "err", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
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
	rec, err := ledger.DecodeStoreRegistration(value)
	if err != nil {
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

// trustNewLedgers tells a damaged store the ledger ids allocated so far:
// the damage cannot hide records of any ledger created after. Without it
// the store stays cautious (UNKNOWN for every ledger it has no record of),
// its registration says its damage may hide every ledger, and every
// ledger placed on it is rolled as soon as it opens: so the counter is
// asked again (etcd may still be electing as the node starts) for up to
// trustCounterFor before the store registers regardless.
func (s *Server) trustNewLedgers(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, trustCounterFor)
	defer cancel()
	for {
		last, err := readLedgerCounter(ctx, s.cli)
		if errors.Is(err, errBadCounter) {
			s.logger.Warn("WAL store: every ledger it has no record of answers UNKNOWN", "err", err)
			return
		}
		if err == nil {
			if !s.store.TrustLedgersAbove(last) {
				s.logger.Warn("WAL store: the ledger id counter is below a ledger the store holds; every ledger it has no record of answers UNKNOWN",
					"counter", last)
			}
			return
		}
		select {
		case <-ctx.Done():
			s.logger.Warn("WAL store: cannot read the ledger id counter; every ledger it has no record of answers UNKNOWN", "err", err)
			return
		case <-time.After(retryEvery):
		}
	}
}

// trustCounterFor bounds trustNewLedgers' retries; retryEvery spaces them.
const (
	trustCounterFor = 30 * time.Second
	retryEvery      = 500 * time.Millisecond
)

// errBadCounter: the ledger id counter holds no number; asking again
// will not change that.
var errBadCounter = errors.New("bad ledger id counter")

// readLedgerCounter reads the last ledger id allocated (0 if none yet).
func readLedgerCounter(ctx context.Context, cli *clientv3.Client) (uint64, error) {
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := cli.Get(actx, keys.LedgerIDCounter)
	if err != nil || len(resp.Kvs) == 0 {
		return 0, err
	}
	last, err := strconv.ParseUint(string(resp.Kvs[0].Value), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w %q: %v", errBadCounter, resp.Kvs[0].Value, err)
	}
	return last, nil
}
