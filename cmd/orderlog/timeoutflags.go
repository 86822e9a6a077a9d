package main

import (
	"flag"
	"fmt"
	"time"

	"orderlog/ingest"
	"orderlog/internal/node"
	"orderlog/sequencer"
)

// timeoutFlags are the timeouts of every server command (dev, node and the
// role commands), defined once here; each command registers those of the
// roles it runs. docs/operations.md lists them with their defaults.
type timeoutFlags struct {
	electionTTL      time.Duration
	sessionTimeout   time.Duration
	grantLease       time.Duration
	closeTimeout     time.Duration
	ingestLeaseTTL   time.Duration
	storeLeaseTTL    time.Duration
	unreachableAfter time.Duration
	grantSilence     time.Duration
	releaseTimeout   time.Duration
	httpRead         time.Duration
	httpIdle         time.Duration
}

// defaultElectionTTL is the sequencer's default election session TTL.
const defaultElectionTTL = 2 * time.Second

func (t *timeoutFlags) register(fs *flag.FlagSet, roles node.Roles) {
	all := roles == node.Roles{}
	if all || roles.Sequencer {
		fs.DurationVar(&t.electionTTL, "election-ttl", defaultElectionTTL,
			"sequencer election lease TTL, whole seconds: a dead leader is replaced about this long after")
		fs.DurationVar(&t.sessionTimeout, "grant-session-timeout", sequencer.DefaultSessionTimeout,
			"sequencer: an ingest node's grant stream silent this long is a dead session (its ledgers are closed)")
		fs.DurationVar(&t.grantLease, "grant-lease", sequencer.DefaultGrantLease,
			"sequencer: a grant unresolved this long has its ledger closed")
		fs.DurationVar(&t.closeTimeout, "close-timeout", sequencer.DefaultCloseTimeout,
			"sequencer: a writer asked to close a ledger has this long before the sequencer recovers it")
	}
	if all || roles.Ingest {
		fs.DurationVar(&t.ingestLeaseTTL, "ingest-lease-ttl", ingest.DefaultLeaseTTL,
			"ingest node's etcd lease TTL, whole seconds: a dead node's sessions and ledgers are taken over about this long after")
		fs.DurationVar(&t.storeLeaseTTL, "store-lease-ttl", ingest.DefaultLeaseTTL,
			"WAL store registration's etcd lease TTL, whole seconds: a dead store leaves ensemble choices this long after")
		fs.DurationVar(&t.unreachableAfter, "unreachable-after", ingest.DefaultUnreachableAfter,
			"ledger writer: a store leaving entries unacknowledged this long is unreachable (below A reachable: the ledger is closed)")
		fs.DurationVar(&t.grantSilence, "grant-stream-silence", ingest.DefaultGrantStreamSilence,
			"ingest: a grant stream on which the sequencer leader sent nothing (it heartbeats every "+
				sequencer.GrantStreamHeartbeat.String()+") this long is dropped and the leader found again")
		fs.DurationVar(&t.releaseTimeout, "release-timeout", ingest.DefaultReleaseTimeout,
			"ingest: a producer's previous owner that has not released it this long after it moved here has its etcd lease revoked instead")
		fs.DurationVar(&t.httpRead, "http-read-timeout", node.DefaultHTTPReadTimeout,
			"HTTP: a request body not read in full this long is cut off (headers: 10 s): a client sending slowly holds no connection for ever")
		fs.DurationVar(&t.httpIdle, "http-idle-timeout", node.DefaultHTTPIdleTimeout,
			"HTTP: a kept-alive connection idle this long is closed")
	}
}

// apply sets the timeouts on cfg; node.Config.Validate checks them.
func (t *timeoutFlags) apply(cfg *node.Config) error {
	for name, d := range map[string]time.Duration{
		"election-ttl": t.electionTTL, "grant-session-timeout": t.sessionTimeout, "grant-lease": t.grantLease,
		"close-timeout": t.closeTimeout, "ingest-lease-ttl": t.ingestLeaseTTL, "store-lease-ttl": t.storeLeaseTTL,
		"unreachable-after": t.unreachableAfter, "grant-stream-silence": t.grantSilence, "release-timeout": t.releaseTimeout,
		"http-read-timeout": t.httpRead, "http-idle-timeout": t.httpIdle,
	} {
		if d < 0 {
			return fmt.Errorf("--%s %s: want a positive duration", name, d)
		}
	}
	cfg.Sequencer = node.SequencerTimeouts{ElectionTTL: t.electionTTL, SessionTimeout: t.sessionTimeout,
		GrantLease: t.grantLease, CloseTimeout: t.closeTimeout}
	cfg.Ingest.LeaseTTL, cfg.StoreLeaseTTL = t.ingestLeaseTTL, t.storeLeaseTTL
	cfg.Ingest.UnreachableAfter, cfg.Ingest.GrantStreamSilence = t.unreachableAfter, t.grantSilence
	cfg.Ingest.ReleaseTimeout = t.releaseTimeout
	cfg.HTTPTimeouts = node.HTTPTimeouts{Read: t.httpRead, Idle: t.httpIdle}
	return nil
}
