package retention

import (
	"time"

	"orderlog/ingest/ledger"
)

// Producer is what retention reads of a producer record.
type Producer struct {
	ID          uint64
	Owner       string
	StateLedger uint64
	Expired     bool
	// OwnerLive: the owner incarnation's liveness key exists.
	OwnerLive bool
	// ModRevision is the record's when read: the orphan expiry compares it.
	ModRevision int64
}

// Pins are the ledgers the producers' rebuilds read: each producer's state
// ledger and every later ledger of the same writer (ingest takeover,
// DESIGN.md §6). A live owner moves its producers' state ledger forward at
// every roll, so these are recent; a dead owner's stay until its producers
// expire.
func Pins(producers []Producer, ledgers []ledger.Metadata) map[uint64]bool {
	byID := make(map[uint64]ledger.Metadata, len(ledgers))
	for _, m := range ledgers {
		byID[m.ID] = m
	}
	pinned := make(map[uint64]bool)
	for _, p := range producers {
		for _, id := range rebuildRange(p, byID, ledgers) {
			pinned[id] = true
		}
	}
	return pinned
}

// Orphans are the producers to expire: their owner is gone (nobody took
// them over since), and every ledger their rebuild reads was closed more
// than expiry ago and lies below start. Such a producer was idle at least
// that long, as a live owner's expiry asks (coordinator.Machine).
func Orphans(producers []Producer, ledgers []ledger.Metadata, start uint64, expiry time.Duration, now time.Time) []Producer {
	if expiry <= 0 {
		return nil
	}
	byID := make(map[uint64]ledger.Metadata, len(ledgers))
	for _, m := range ledgers {
		byID[m.ID] = m
	}
	cutoff := now.Add(-expiry).UnixMilli()
	var out []Producer
	for _, p := range producers {
		ids := rebuildRange(p, byID, ledgers)
		if p.OwnerLive || len(ids) == 0 {
			continue
		}
		old := true
		for _, id := range ids {
			m := byID[id]
			if m.State != ledger.StateClosed || m.ClosedAt > cutoff || (m.HasOffsets() && m.EndOffset > start) {
				old = false
				break
			}
		}
		if old {
			out = append(out, p)
		}
	}
	return out
}

// rebuildRange is the ledgers a takeover of p reads.
func rebuildRange(p Producer, byID map[uint64]ledger.Metadata, ledgers []ledger.Metadata) []uint64 {
	state, ok := byID[p.StateLedger]
	if p.Expired || p.StateLedger == 0 || !ok {
		return nil
	}
	var ids []uint64
	for _, m := range ledgers {
		if m.WriterIncarnation == state.WriterIncarnation && m.ID >= p.StateLedger {
			ids = append(ids, m.ID)
		}
	}
	return ids
}
