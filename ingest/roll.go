package ingest

import (
	"slices"
	"time"

	"orderlog/ingest/ledger"
)

// openWriter is one of the node's open ledgers, with what its roll is
// decided on.
type openWriter struct {
	*ledger.Writer
	opened time.Time
	bytes  int64 // entry payload bytes appended
}

// writerIDs are the open ledgers' ids, in increasing order.
func (n *Node) writerIDs() []uint64 {
	ids := make([]uint64, 0, len(n.writers))
	for id := range n.writers {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// currentWriter is the ledger the machine appends to, nil if none.
func (n *Node) currentWriter() *ledger.Writer {
	if w := n.writers[n.machine.Ledger()]; w != nil {
		return w.Writer
	}
	return nil
}

// checkRoll asks the machine for a roll once the open ledger reached
// RollBytes or RollAge (DESIGN.md §6, "ledger rolling").
func (n *Node) checkRoll(now time.Time) {
	w := n.writers[n.machine.Ledger()]
	if w == nil || now.Before(n.roll.notBefore) {
		return
	}
	reason := ""
	switch {
	case n.cfg.RollBytes > 0 && w.bytes >= n.cfg.RollBytes:
		reason = "size"
	case n.cfg.RollAge > 0 && now.Sub(w.opened) >= n.cfg.RollAge:
		reason = "age"
	default:
		return
	}
	if n.machine.Roll(reason) {
		n.metrics.ledgerRolls.WithLabelValues(reason).Inc()
	}
}

// rollBackoff spaces the attempts of a roll whose next ledger could not be
// created (no store will take a new ledger: a full disk, too few stores),
// from rollRetryMin doubling to rollRetryMax: each attempt leaves a ledger
// record behind, and the open ledger goes on meanwhile.
type rollBackoff struct {
	pause     time.Duration
	notBefore time.Time
}

const (
	rollRetryMin = time.Second
	rollRetryMax = time.Minute
)

func (n *Node) rollFailed() {
	n.roll.pause = min(max(2*n.roll.pause, rollRetryMin), rollRetryMax)
	n.roll.notBefore = time.Now().Add(n.roll.pause)
}
