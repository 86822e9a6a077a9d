package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"orderlog/internal/event"
	keeplease "orderlog/internal/lease"
)

// storeRegistration keeps a WAL store registered at keys.Store(id), bound
// to an etcd lease, for as long as the process runs. When the lease is lost
// (etcd let it expire during an outage, or it was revoked) the store's disk
// is still intact, so it registers again under a new lease with the same
// store id and incarnation, retrying until etcd answers.
//
// Invariant: mu.lease is the lease the registration was last written
// with; mu.lost is nil exactly while that lease is alive as far as the
// keepalive knows.
type storeRegistration struct {
	cli    *clientv3.Client
	rec    storeRecord
	ttl    time.Duration
	events event.Listener
	logger *slog.Logger
	done   chan struct{} // closed when keep returns
	mu     struct {
		sync.Mutex
		lease clientv3.LeaseID
		lost  error // why the store is not registered now
	}
}

// Backoff between attempts to register again while etcd is unreachable.
const (
	registrationRetryMin = 100 * time.Millisecond
	registrationRetryMax = 2 * time.Second
)

// startStoreRegistration registers rec under a new lease of ttl and keeps
// it registered until ctx ends.
func startStoreRegistration(ctx context.Context, cli *clientv3.Client, rec storeRecord, ttl time.Duration,
	events event.Listener, logger *slog.Logger) (*storeRegistration, error) {
	r := &storeRegistration{cli: cli, rec: rec, ttl: ttl, events: events, logger: logger, done: make(chan struct{})}
	lost, err := r.register(ctx, ctx)
	if err != nil {
		return nil, err
	}
	go r.keep(ctx, lost)
	return r, nil
}

// register grants a lease, writes the registration bound to it (both
// bounded by ctx) and starts the lease's keepalive, whose channel closes
// when the lease is lost or keepCtx ends.
func (r *storeRegistration) register(ctx, keepCtx context.Context) (<-chan struct{}, error) {
	lease, err := r.cli.Grant(ctx, int64(max(r.ttl, 2*time.Second)/time.Second))
	if err != nil {
		return nil, fmt.Errorf("store lease: %w", err)
	}
	if err := registerStore(ctx, r.cli, r.rec, lease.ID); err != nil {
		r.revokeLease(lease.ID)
		return nil, err
	}
	lost, err := keeplease.Keep(keepCtx, r.cli, lease.ID, max(r.ttl, 2*time.Second), func() {
		r.logger.Info("WAL store: etcd lease outlived a gap in its renewals", "store", r.rec.StoreID, "lease", fmt.Sprintf("%x", int64(lease.ID)))
	})
	if err != nil {
		r.revokeLease(lease.ID)
		return nil, fmt.Errorf("store lease keepalive: %w", err)
	}
	r.mu.Lock()
	r.mu.lease, r.mu.lost = lease.ID, nil
	r.mu.Unlock()
	r.events.StoreRegistered(event.StoreInfo{StoreID: r.rec.StoreID, Incarnation: r.rec.Incarnation, Address: r.rec.Address})
	return lost, nil
}

// keep waits for each lease loss and registers again, until ctx ends.
func (r *storeRegistration) keep(ctx context.Context, lost <-chan struct{}) {
	defer close(r.done)
	for {
		<-lost
		if ctx.Err() != nil { // a clean stop: Close revokes the lease
			return
		}
		r.noteLost()
		if lost = r.registerAgain(ctx); lost == nil {
			return
		}
	}
}

// noteLost marks the store unregistered and fires LeaseLost, once per loss.
func (r *storeRegistration) noteLost() {
	r.mu.Lock()
	lease := r.mu.lease
	r.mu.lost = fmt.Errorf("store: etcd lease %x lost; registering %s again", int64(lease), r.rec.StoreID)
	r.mu.Unlock()
	r.events.LeaseLost(event.LeaseInfo{Holder: "store " + r.rec.StoreID, LeaseID: int64(lease)})
}

// registerAgain retries register with backoff until it succeeds (then it
// returns the new keepalive channel) or ctx ends (nil).
func (r *storeRegistration) registerAgain(ctx context.Context) <-chan struct{} {
	since := time.Now()
	wait := registrationRetryMin
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, max(r.ttl, 2*time.Second))
		lost, err := r.register(actx, ctx)
		cancel()
		if err == nil {
			r.logger.Info("WAL store registered again after losing its etcd lease", "store", r.rec.StoreID,
				"incarnation", r.rec.Incarnation, "lease", fmt.Sprintf("%x", int64(r.lease())), "attempts", attempt,
				"unregistered_for", time.Since(since))
			return lost
		}
		if ctx.Err() != nil {
			return nil
		}
		r.setLost(fmt.Errorf("store: not registered in etcd since its lease was lost %s ago: %w", time.Since(since).Round(time.Millisecond), err))
		if attempt == 1 || attempt%10 == 0 {
			r.logger.Warn("WAL store cannot register again yet; retrying", "store", r.rec.StoreID, "attempt", attempt, "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		wait = min(2*wait, registrationRetryMax)
	}
}

func (r *storeRegistration) setLost(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.mu.lost = err
}

func (r *storeRegistration) lease() clientv3.LeaseID {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mu.lease
}

// ready returns nil while the store is registered, else why not.
func (r *storeRegistration) ready() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mu.lost
}

// close revokes the current lease once keep has stopped (its context
// ended), so no ensemble chooses a store that is gone.
func (r *storeRegistration) close() {
	<-r.done
	r.revokeLease(r.lease())
}

func (r *storeRegistration) revokeLease(id clientv3.LeaseID) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := r.cli.Revoke(ctx, id); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		r.logger.Debug("revoke store lease", "lease", fmt.Sprintf("%x", int64(id)), "err", err)
	}
}
