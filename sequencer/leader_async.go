package sequencer

import (
	"errors"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"orderlog/internal/keys"
)

// The leader's background work: etcd and ledger calls that must not run
// under the leader lock. Each feeds its result back to the machine.

// watchIngests feeds IncarnationGone when an ingest liveness key is
// deleted (its node's etcd lease expired or was revoked): §5's third
// condition of a live session.
func (l *leader) watchIngests() {
	defer l.wg.Done()
	var from int64 // the revision to watch from; 0 = now
	for l.ctx.Err() == nil {
		opts := []clientv3.OpOption{clientv3.WithPrefix()}
		if from > 0 {
			opts = append(opts, clientv3.WithRev(from))
		}
		for resp := range l.node.cfg.Etcd.Watch(clientv3.WithRequireLeader(l.ctx), keys.IngestPrefix, opts...) {
			if resp.CompactRevision > 0 {
				from = resp.CompactRevision // what lay before it is gone
			}
			if resp.Header.Revision > 0 {
				from = max(from, resp.Header.Revision+1)
			}
			for _, ev := range resp.Events {
				if ev.Type != clientv3.EventTypeDelete {
					continue
				}
				inc := strings.TrimPrefix(string(ev.Kv.Key), keys.IngestPrefix)
				l.mu.Lock()
				l.mu.m.IncarnationGone(l.now(), inc)
				l.handleLocked()
				l.mu.Unlock()
			}
		}
		// The watch ended without the leader stepping down (the etcd member
		// lost its leader, or a compaction): watch again from where it
		// stopped, or no lease revocation would reach the machine for the
		// rest of the term.
		select {
		case <-l.ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// goRecover recovers a ledger through the ledger client, retrying until it
// succeeds or the leader steps down, then feeds LedgerClosed.
func (l *leader) goRecover(id uint64) {
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		lastErr := ""
		for l.ctx.Err() == nil {
			spans, err := l.ctl.Recover(l.ctx, id)
			if err == nil {
				l.ledgerClosed(id, spans)
				return
			}
			if err.Error() != lastErr && l.ctx.Err() == nil { // once per kind of failure, not per retry
				lastErr = err.Error()
				l.node.cfg.Logger.Warn("sequencer: ledger recovery failed; retrying", "epoch", l.epoch, "ledger", id, "err", err)
			}
			select {
			case <-l.ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
}

// goClosedByWriter closes a ledger its writer (the session s) says it
// closed. The ledger's entries are read back for their spans only if some
// offset granted to it is still undecided: reading back a rolled ledger (a
// gigabyte at the default roll size) cost the node a second or two of CPU
// and disk, and the producers' acks with it, after every roll.
func (l *leader) goClosedByWriter(s *grantStream, id uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.mu.deposed:
		return // shutdown may be waiting for the helpers: start none after it began
	case !l.mu.m.LedgerUnclosed(id):
		return // unknown, or closed already (a recovery won): nothing to decide
	case l.mu.m.LedgerSettled(id, s.incarnation):
		l.node.writerCloses.settled.Add(1)
		l.mu.m.LedgerClosed(l.now(), id, nil)
		l.handleLocked()
		return
	}
	l.node.writerCloses.readBack.Add(1)
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		spans, err := l.ctl.ClosedSpans(l.ctx, id)
		if err != nil {
			return // the close timeout's recovery settles it
		}
		l.ledgerClosed(id, spans)
	}()
}

func (l *leader) ledgerClosed(id uint64, spans []EntrySpan) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.mu.m.LedgerClosed(l.now(), id, spans)
	l.handleLocked()
}

func (l *leader) goReserve(r Reservation) {
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		err := l.store.extend(l.ctx, r.Expect, r.New)
		l.mu.Lock()
		defer l.mu.Unlock()
		var ahead *reservedAheadError
		switch {
		case err == nil:
			l.mu.m.ReservationExtended(r.New)
		case errors.As(err, &ahead): // our own earlier extension, its answer lost
			l.mu.m.ReservationExtended(ahead.current)
		case errors.Is(err, ErrDeposed):
			l.deposeLocked("a newer epoch took the offset reservation")
		default:
			l.mu.m.ReservationFailed()
		}
		l.handleLocked()
	}()
}
