// Package campaign runs a cluster-wide singleton worker: it campaigns in an
// etcd election and runs the worker while elected, campaigning again when
// its session ends. The re-replication and retention workers use it.
//
// It owns nothing but the election session; it must never run the worker
// outside a held election.
package campaign

import (
	"context"
	"log/slog"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"orderlog/internal/event"
)

// Config names an election.
type Config struct {
	Etcd *clientv3.Client
	// Prefix is the election's key prefix; Name this process's value,
	// the same across its restarts and no other process's (a node and
	// its store id): a key with this name under another lease is this
	// process's before a restart, and is revoked rather than waited out.
	Prefix, Name string
	// SessionTTL is the session's lease TTL in seconds.
	SessionTTL int
	// Logger logs failed elections, as What ("retention", ...); nil
	// discards.
	Logger *slog.Logger
	What   string
}

// Run campaigns until ctx ends; each time it is elected it calls lead with
// a context that ends with the session and the election key (compare it in
// a transaction to act only while leading). A failed election is logged
// and tried again after a second.
func Run(ctx context.Context, cfg Config, lead func(ctx context.Context, key string)) {
	cfg.Logger = event.OrDiscard(cfg.Logger)
	for ctx.Err() == nil {
		if err := once(ctx, cfg, lead); err != nil && ctx.Err() == nil {
			cfg.Logger.Warn(cfg.What+": election failed, retrying", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}

func once(ctx context.Context, cfg Config, lead func(ctx context.Context, key string)) error {
	session, err := concurrency.NewSession(cfg.Etcd, concurrency.WithTTL(cfg.SessionTTL), concurrency.WithContext(ctx))
	if err != nil {
		return err
	}
	defer session.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-session.Done():
			cancel()
		case <-ctx.Done():
		}
	}()
	revokeEarlierKeys(ctx, cfg, session.Lease())
	election := concurrency.NewElection(session, cfg.Prefix)
	if err := election.Campaign(ctx, cfg.Name); err != nil {
		return err
	}
	lead(ctx, election.Key())
	return nil
}

// revokeEarlierKeys revokes the leases of keys this process left in the
// election before it restarted: a killed leader's key otherwise holds the
// election for its session's TTL after every restart (retention stalled
// under repeated kills). Best effort: a failure only means waiting.
func revokeEarlierKeys(ctx context.Context, cfg Config, own clientv3.LeaseID) {
	resp, err := cfg.Etcd.Get(ctx, cfg.Prefix+"/", clientv3.WithPrefix())
	if err != nil {
		return
	}
	for _, kv := range resp.Kvs {
		if string(kv.Value) == cfg.Name && clientv3.LeaseID(kv.Lease) != own && kv.Lease != 0 {
			_, _ = cfg.Etcd.Revoke(ctx, clientv3.LeaseID(kv.Lease))
		}
	}
}
