// Package event is orderlog's hook for the things an operator or a test
// wants to know happened: a sequencer elected, a ledger fenced or
// recovered, a writer that lost its quorum, a lease lost, a store
// registered, a slow fsync, a reader back in step with the commit map.
//
// A Listener is a struct of optional callbacks. Components take one in
// their Config and call its fields where the event happens; Logging turns
// events into log lines and Tee combines listeners, so that logs, metrics
// and tests share the same calls:
//
//	events := event.Tee(event.Logging(logger), cfg.Events)
//
// Invariants: an event is fired once per occurrence of what it names (a
// leader change, a recovery), never per message, so a listener may log
// every call. Callbacks are called synchronously from the component's own
// goroutines, sometimes with its locks held: they must return quickly and
// must never call back into the component that fired them.
//
// This package owns the event types and the log lines they produce; it
// must never import another orderlog package (every component imports it).
package event

import (
	"time"
)

// Listener holds the callbacks; a nil field ignores its event. Call
// EnsureDefaults (or build it with Tee) before calling fields directly.
type Listener struct {
	// LeaderElected: a sequencer node finished its takeover and grants as
	// the leader of Epoch.
	LeaderElected func(LeaderInfo)
	// LeaderLost: a sequencer leader stopped leading Epoch (deposed,
	// fenced, its session expired, or stopped); Reason says which.
	LeaderLost func(LeaderInfo)
	// LedgerFenced: a recovery fenced a ledger on enough stores that its
	// writer can never again reach an ack quorum.
	LedgerFenced func(FenceInfo)
	// LedgerRecovered: a recovery of someone else's ledger ended; Outcome
	// says how.
	LedgerRecovered func(RecoveryInfo)
	// RecoveryWaiting: a recovery has waited a while on one entry: no store
	// holds it and too few fenced stores answer that they never did.
	RecoveryWaiting func(RecoveryWaitInfo)
	// WriterFailed: a ledger writer can confirm nothing more: it lost its
	// ack quorum or found its ledger fenced.
	WriterFailed func(WriterFailure)
	// LeaseLost: an etcd lease that kept a key alive (an ingest node's
	// liveness key, a store's registration) expired or was revoked.
	LeaseLost func(LeaseInfo)
	// StoreRegistered: a WAL store recorded its incarnation and address.
	StoreRegistered func(StoreInfo)
	// SlowSync: an fdatasync of the WAL took at least the store's
	// threshold.
	SlowSync func(SyncInfo)
	// DiskFull: the WAL store's disk reached its high-water mark (Full)
	// or fell below its low-water mark again (not Full).
	DiskFull func(DiskInfo)
	// ReaderCatchingUp: a reader lost (or has not yet found) the
	// sequencer's commit-map stream; reads may wait until ReaderInStep.
	ReaderCatchingUp func(ReaderInfo)
	// ReaderInStep: a reader applied the first watermark of a leader's
	// commit-map stream; reads below C work.
	ReaderInStep func(ReaderInfo)
	// ProducerTakeover: an ingest node became the owner of a producer.
	ProducerTakeover func(TakeoverInfo)
	// LedgerOpened and LedgerClosed: an ingest node opened or closed one of
	// its own ledgers.
	LedgerOpened func(LedgerInfo)
	LedgerClosed func(LedgerInfo)
	// ReadinessChanged: a process's readiness (GET /readyz, the gRPC health
	// service) changed.
	ReadinessChanged func(ReadinessInfo)
	// LedgerRereplicated: the re-replication worker copied a closed ledger
	// onto more stores and changed its ensemble in etcd.
	LedgerRereplicated func(RereplicationInfo)
}

// LeaderInfo describes a sequencer leader's term.
type LeaderInfo struct {
	// Address is the node's gRPC address (its election value).
	Address string
	// Epoch is the term's fencing epoch.
	Epoch uint64
	// C0 is the committed watermark the leader took over at, Reserved the
	// offset reservation it found, UnclosedLedgers the older ledgers it had
	// to close or recover (LeaderElected only).
	C0, Reserved    uint64
	UnclosedLedgers int
	// Took is how long the takeover lasted (LeaderElected) or the term
	// (LeaderLost).
	Took time.Duration
	// Reason says why the term ended (LeaderLost only).
	Reason string
}

// FenceInfo describes a recovery's fence.
type FenceInfo struct {
	Ledger uint64
	// Stores are the ensemble members that acknowledged the fence.
	Stores []string
	// LAC is the highest last-add-confirmed a fenced store reported: the
	// recovery walks upward from the entry after it.
	LAC int64
}

// RecoveryWaitInfo describes a recovery stuck on one entry.
type RecoveryWaitInfo struct {
	Ledger uint64
	Entry  int64
	// Answers are each member's last answer ("store-id=ABSENT fenced",
	// "…=UNKNOWN", "…=no reply").
	Answers []string
	Waited  time.Duration
}

// RecoveryOutcome is how a ledger recovery ended.
type RecoveryOutcome string

const (
	// RecoveryClosed: this recovery closed the ledger.
	RecoveryClosed RecoveryOutcome = "closed"
	// RecoveryAlreadyClosed: the ledger was closed before the recovery began.
	RecoveryAlreadyClosed RecoveryOutcome = "already_closed"
	// RecoveryClosedElsewhere: another recovery or the writer closed it
	// while this one worked.
	RecoveryClosedElsewhere RecoveryOutcome = "closed_elsewhere"
	// RecoveryFailed: the recovery stopped without a close (Err says why;
	// the ledger stays recovering and may be recovered again).
	RecoveryFailed RecoveryOutcome = "failed"
)

// RecoveryInfo describes one ledger recovery.
type RecoveryInfo struct {
	Ledger  uint64
	Epoch   uint64 // the sequencer epoch the ledger was created in
	Writer  string // the writer incarnation that created it
	Outcome RecoveryOutcome
	// Last is the ledger's last entry (-1: none) and [FirstOffset,
	// EndOffset) the offsets it covers, once closed.
	Last                   int64
	FirstOffset, EndOffset uint64
	Duration               time.Duration
	Err                    error // RecoveryFailed only
}

// WriterFailure describes a ledger writer that can confirm nothing more.
type WriterFailure struct {
	Ledger uint64
	Epoch  uint64
	Writer string
	// LAC is the last entry the writer had confirmed.
	LAC int64
	Err error
}

// LeaseInfo describes a lost etcd lease.
type LeaseInfo struct {
	// Holder says whose lease it was: an ingest incarnation, "store <id>".
	Holder  string
	LeaseID int64
}

// StoreInfo describes a WAL store's registration.
type StoreInfo struct {
	StoreID     string
	Incarnation uint64
	Address     string
}

// SyncInfo describes one slow fdatasync.
type SyncInfo struct {
	// Dir is the store's directory, Segment the file synced.
	Dir, Segment string
	Duration     time.Duration
	Threshold    time.Duration
	Err          error
}

// DiskInfo describes the WAL store's disk when it crossed a mark.
type DiskInfo struct {
	Dir                string
	Full               bool
	Used, Avail, Total uint64
	// Fraction is the used share, Mark the mark crossed.
	Fraction, Mark float64
}

// ReaderInfo describes a reader's position against the commit map.
type ReaderInfo struct {
	// Leader is the sequencer leader's address ("" when unknown).
	Leader string
	// Epoch and Committed are the commit map's epoch and C.
	Epoch     int64
	Committed uint64
	// Waited is how long the reader was catching up (ReaderInStep).
	Waited time.Duration
	// Err is why the stream was lost (ReaderCatchingUp; nil at a start).
	Err error
}

// TakeoverInfo describes a producer changing owner.
type TakeoverInfo struct {
	Producer           uint64
	Name               string
	FromOwner, ToOwner string
	Duration           time.Duration
}

// LedgerInfo describes an ingest node's own ledger.
type LedgerInfo struct {
	Ledger uint64
	Epoch  uint64
	Writer string
	// Last is the last entry (LedgerClosed; -1: none).
	Last int64
	// Reason says why it was opened or closed.
	Reason string
}

// RereplicationInfo describes one ensemble change of a closed ledger.
type RereplicationInfo struct {
	Ledger uint64
	Epoch  uint64
	Writer string
	// Last is the ledger's last entry; entries 0..Last were copied.
	Last int64
	// Lost are the stores whose copies no longer counted (new incarnation,
	// or registration gone longer than the grace period).
	Lost []string
	// Added are the stores that received a full copy.
	Added []string
	// Copies is the ensemble size after the change, Intended the ledger's W.
	Copies   int
	Intended int
	// Took is how long the copies and the change took.
	Took time.Duration
}

// ReadinessInfo describes a change of readiness.
type ReadinessInfo struct {
	Ready bool
	// Reason is why the process is not ready ("" when ready).
	Reason string
}

// EnsureDefaults sets every nil field to a no-op, so that components can
// call fields without checking them.
func (l *Listener) EnsureDefaults() {
	ensure(&l.LeaderElected)
	ensure(&l.LeaderLost)
	ensure(&l.LedgerFenced)
	ensure(&l.LedgerRecovered)
	ensure(&l.RecoveryWaiting)
	ensure(&l.WriterFailed)
	ensure(&l.LeaseLost)
	ensure(&l.StoreRegistered)
	ensure(&l.SlowSync)
	ensure(&l.DiskFull)
	ensure(&l.ReaderCatchingUp)
	ensure(&l.ReaderInStep)
	ensure(&l.ProducerTakeover)
	ensure(&l.LedgerOpened)
	ensure(&l.LedgerClosed)
	ensure(&l.ReadinessChanged)
	ensure(&l.LedgerRereplicated)
}

func ensure[T any](f *func(T)) {
	if *f == nil {
		*f = func(T) {}
	}
}

// Tee returns a listener that calls a's callback, then b's, for every
// event. Its fields are never nil.
func Tee(a, b Listener) Listener {
	a.EnsureDefaults()
	b.EnsureDefaults()
	return Listener{
		LeaderElected:      both(a.LeaderElected, b.LeaderElected),
		LeaderLost:         both(a.LeaderLost, b.LeaderLost),
		LedgerFenced:       both(a.LedgerFenced, b.LedgerFenced),
		LedgerRecovered:    both(a.LedgerRecovered, b.LedgerRecovered),
		RecoveryWaiting:    both(a.RecoveryWaiting, b.RecoveryWaiting),
		WriterFailed:       both(a.WriterFailed, b.WriterFailed),
		LeaseLost:          both(a.LeaseLost, b.LeaseLost),
		StoreRegistered:    both(a.StoreRegistered, b.StoreRegistered),
		SlowSync:           both(a.SlowSync, b.SlowSync),
		DiskFull:           both(a.DiskFull, b.DiskFull),
		ReaderCatchingUp:   both(a.ReaderCatchingUp, b.ReaderCatchingUp),
		ReaderInStep:       both(a.ReaderInStep, b.ReaderInStep),
		ProducerTakeover:   both(a.ProducerTakeover, b.ProducerTakeover),
		LedgerOpened:       both(a.LedgerOpened, b.LedgerOpened),
		LedgerClosed:       both(a.LedgerClosed, b.LedgerClosed),
		ReadinessChanged:   both(a.ReadinessChanged, b.ReadinessChanged),
		LedgerRereplicated: both(a.LedgerRereplicated, b.LedgerRereplicated),
	}
}

func both[T any](a, b func(T)) func(T) {
	return func(info T) {
		a(info)
		b(info)
	}
}
