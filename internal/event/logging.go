package event

import (
	"context"
	"log/slog"
)

// Logging returns a listener that logs every event as one line on logger
// (nil: discard), with the ids needed to follow it: ledger, epoch, writer,
// store, leader address. Failures are logged at Warn or Error, state
// changes at Info.
func Logging(logger *slog.Logger) Listener {
	log := OrDiscard(logger)
	return Listener{
		LeaderElected: func(i LeaderInfo) {
			log.Info("sequencer leader elected", "addr", i.Address, "epoch", i.Epoch, "c0", i.C0,
				"reserved", i.Reserved, "unclosed_ledgers", i.UnclosedLedgers, "took", i.Took)
		},
		LeaderLost: func(i LeaderInfo) {
			log.Warn("sequencer leader lost leadership", "addr", i.Address, "epoch", i.Epoch, "reason", i.Reason, "term", i.Took)
		},
		LedgerFenced: func(i FenceInfo) {
			log.Info("ledger fenced", "ledger", i.Ledger, "stores", i.Stores, "lac", i.LAC)
		},
		RecoveryWaiting: func(i RecoveryWaitInfo) {
			log.Warn("ledger recovery waits on an entry", "ledger", i.Ledger, "entry", i.Entry, "answers", i.Answers, "waited", i.Waited)
		},
		LedgerRecovered: func(i RecoveryInfo) {
			attrs := []any{"ledger", i.Ledger, "epoch", i.Epoch, "writer", i.Writer, "outcome", string(i.Outcome),
				"last_entry", i.Last, "first_offset", i.FirstOffset, "end_offset", i.EndOffset, "took", i.Duration}
			switch {
			case i.Err != nil:
				log.Warn("ledger recovery failed", append(attrs, "err", i.Err)...)
			case i.Outcome == RecoveryAlreadyClosed:
				log.Debug("ledger recovery found it closed", attrs...)
			default:
				log.Info("ledger recovered", attrs...)
			}
		},
		WriterFailed: func(i WriterFailure) {
			log.Error("ledger writer failed", "ledger", i.Ledger, "epoch", i.Epoch, "writer", i.Writer, "lac", i.LAC, "err", i.Err)
		},
		LeaseLost: func(i LeaseInfo) {
			log.Error("etcd lease lost", "holder", i.Holder, "lease", i.LeaseID)
		},
		StoreRegistered: func(i StoreInfo) {
			log.Info("WAL store registered", "store", i.StoreID, "incarnation", i.Incarnation, "addr", i.Address)
		},
		SlowSync: func(i SyncInfo) {
			attrs := []any{"dir", i.Dir, "segment", i.Segment, "took", i.Duration, "threshold", i.Threshold}
			if i.Err != nil {
				attrs = append(attrs, "err", i.Err)
			}
			log.Warn("slow WAL fsync", attrs...)
		},
		DiskFull: func(i DiskInfo) {
			attrs := []any{"dir", i.Dir, "used_fraction", i.Fraction, "mark", i.Mark, "used", i.Used, "avail", i.Avail, "total", i.Total}
			if i.Full {
				log.Warn("WAL disk full: refusing new messages", attrs...)
				return
			}
			log.Info("WAL disk has room again: accepting messages", attrs...)
		},
		ReaderCatchingUp: func(i ReaderInfo) {
			attrs := []any{"epoch", i.Epoch, "committed", i.Committed}
			if i.Err != nil {
				attrs = append(attrs, "err", i.Err)
			}
			log.Info("reader catching up with the commit map", attrs...)
		},
		ReaderInStep: func(i ReaderInfo) {
			log.Info("reader in step with the commit map", "leader", i.Leader, "epoch", i.Epoch,
				"committed", i.Committed, "waited", i.Waited)
		},
		ProducerTakeover: func(i TakeoverInfo) {
			log.Info("producer taken over", "producer", i.Producer, "name", i.Name, "from", i.FromOwner,
				"to", i.ToOwner, "took", i.Duration)
		},
		LedgerOpened: func(i LedgerInfo) {
			log.Info("ledger opened", "ledger", i.Ledger, "epoch", i.Epoch, "writer", i.Writer, "reason", i.Reason)
		},
		LedgerClosed: func(i LedgerInfo) {
			log.Info("ledger closed", "ledger", i.Ledger, "epoch", i.Epoch, "writer", i.Writer, "last_entry", i.Last, "reason", i.Reason)
		},
		LedgerRereplicated: func(i RereplicationInfo) {
			log.Info("ledger re-replicated", "ledger", i.Ledger, "epoch", i.Epoch, "writer", i.Writer, "last_entry", i.Last,
				"lost", i.Lost, "added", i.Added, "copies", i.Copies, "intended", i.Intended, "took", i.Took)
		},
		ReadinessChanged: func(i ReadinessInfo) {
			if i.Ready {
				log.Info("ready")
				return
			}
			log.Info("not ready", "reason", i.Reason)
		},
	}
}

// OrDiscard returns logger, or a logger that discards everything when it
// is nil: the meaning of a nil *slog.Logger in every orderlog Config.
func OrDiscard(logger *slog.Logger) *slog.Logger {
	if logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return logger
}

// Enabled reports whether logger (nil: discard) logs at level; for
// callers that would otherwise build attributes for nothing.
func Enabled(logger *slog.Logger, level slog.Level) bool {
	return logger != nil && logger.Enabled(context.Background(), level)
}
