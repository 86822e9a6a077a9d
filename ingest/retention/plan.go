package retention

import (
	"cmp"
	"slices"
	"time"

	"orderlog/ingest/ledger"
)

// Policy is how much of the log is kept. A zero field keeps everything by
// that measure; a ledger goes once either measure says so.
type Policy struct {
	// Age: messages older than this go (Kafka's retention.ms).
	Age time.Duration
	// Bytes: the oldest ledgers go while the log holds more entry bytes
	// than this (Kafka's retention.bytes, counted once, not per copy).
	Bytes int64
}

// Input is what a pass knows.
type Input struct {
	// Ledgers is every ledger's metadata, any state.
	Ledgers []ledger.Metadata
	// Deleting are the ledgers already marked for deletion.
	Deleting map[uint64]bool
	// Pinned are ledgers a producer's rebuild reads (Pins), and the
	// retained set's.
	Pinned map[uint64]bool
	// Retained are the retained set's ledgers: not the log's, not counted
	// against the byte limit.
	Retained map[uint64]bool
	// Committed is C; Start the current log start. With Capped, Ceiling
	// bounds the start too: with an archive, the archived watermark T
	// (offsets below the start are read from the archive then).
	Committed, Start, Ceiling uint64
	Capped                    bool
	Now                       time.Time
	// CheckpointLedger and CheckpointFirst are the commit-log checkpoint
	// pointer's ledger and first_ledger: checkpoint ledgers below
	// CheckpointFirst, other than CheckpointLedger, are named by no
	// checkpoint.
	CheckpointLedger, CheckpointFirst uint64
	// DeleteUpTo bounds the deletions: only ledgers below a start that
	// has stood for the grace go (readers learn a start by a watch, and a
	// reader still reading below it finds its ledgers there meanwhile).
	// Grace: only ledgers closed at least that long ago go (a producer's
	// state may be recorded in a ledger a moment after it closed).
	DeleteUpTo uint64
	Grace      time.Duration
}

// Decision is a pass's outcome.
type Decision struct {
	// Start is the new log start: ≥ Input.Start, ≤ Input.Committed and
	// the Ceiling.
	Start uint64
	// Delete are the ledgers to mark and delete, in id order.
	Delete []ledger.Metadata
}

// defaultBytesPerOffset estimates a message's entry bytes when no closed
// ledger says (1 KiB messages plus their batch overhead).
const defaultBytesPerOffset = 1100

// Plan decides the log start and the ledgers to delete.
func Plan(in Input, p Policy) Decision {
	data := dataLedgers(in)
	limit := in.Committed
	if in.Capped {
		limit = min(limit, in.Ceiling)
	}
	start := max(in.Start, min(limit, max(startByAge(data, p, in.Now), startByBytes(data, p))))
	return Decision{Start: start, Delete: deletable(in, min(start, in.DeleteUpTo))}
}

// dataLedgers are the closed ledgers holding offsets not yet all below the
// start (those below it count no more, even while a pin keeps them),
// oldest offsets first.
func dataLedgers(in Input) []ledger.Metadata {
	var out []ledger.Metadata
	for _, m := range in.Ledgers {
		if m.State == ledger.StateClosed && m.HasOffsets() && !in.Deleting[m.ID] && !in.Retained[m.ID] && m.EndOffset > in.Start {
			out = append(out, m)
		}
	}
	slices.SortFunc(out, func(a, b ledger.Metadata) int {
		return cmp.Or(cmp.Compare(a.EndOffset, b.EndOffset), cmp.Compare(a.ID, b.ID))
	})
	return out
}

// startByAge is the end of the newest-ending ledger closed before the age
// limit: every offset below it was granted before that ledger's last
// grant (offsets are granted in real-time order), so before its close.
func startByAge(data []ledger.Metadata, p Policy, now time.Time) uint64 {
	if p.Age <= 0 {
		return 0
	}
	cutoff := now.Add(-p.Age).UnixMilli()
	var start uint64
	for _, m := range data {
		// A ledger closed before closed_at existed has an unknown age: it
		// goes once a later ledger is old enough (its offsets are lower).
		if m.ClosedAt != 0 && m.ClosedAt <= cutoff {
			start = max(start, m.EndOffset)
		}
	}
	return start
}

// startByBytes drops the ledgers ending first while the rest hold more than
// the limit.
func startByBytes(data []ledger.Metadata, p Policy) uint64 {
	if p.Bytes <= 0 {
		return 0
	}
	perOffset := bytesPerOffset(data)
	var total int64
	for _, m := range data {
		total += ledgerBytes(m, perOffset)
	}
	var start uint64
	for _, m := range data {
		if total <= p.Bytes {
			break
		}
		total -= ledgerBytes(m, perOffset)
		start = m.EndOffset
	}
	return start
}

// ledgerBytes is the ledger's bytes, estimated from its offsets when its
// writer did not count them (a recovery closed it).
func ledgerBytes(m ledger.Metadata, perOffset float64) int64 {
	if m.Bytes > 0 {
		return m.Bytes
	}
	return int64(float64(m.EndOffset-m.FirstOffset) * perOffset)
}

func bytesPerOffset(data []ledger.Metadata) float64 {
	var bytes, offsets uint64
	for _, m := range data {
		if m.Bytes > 0 {
			bytes += uint64(m.Bytes)
			offsets += m.EndOffset - m.FirstOffset
		}
	}
	if offsets == 0 {
		return defaultBytesPerOffset
	}
	return float64(bytes) / float64(offsets)
}

// deletable are the closed, unpinned, unmarked ledgers wholly below start:
// those holding offsets, and those without (only producer snapshots) of an
// ingest writer (Kind ingest, or, for ledgers created before Kind existed,
// one its writer wrote before one of its ledgers that is below start).
// Of the sequencer's ledgers only checkpoint ledgers no checkpoint names
// go (below the pointer's first_ledger); its commit ledgers are its own to
// delete.
func deletable(in Input, start uint64) []ledger.Metadata {
	lastBelow := make(map[string]uint64) // writer → its newest ledger wholly below start
	for _, m := range in.Ledgers {
		if m.State == ledger.StateClosed && m.HasOffsets() && m.EndOffset <= start {
			lastBelow[m.WriterIncarnation] = max(lastBelow[m.WriterIncarnation], m.ID)
		}
	}
	var out []ledger.Metadata
	closedBy := in.Now.Add(-in.Grace).UnixMilli()
	for _, m := range in.Ledgers {
		if m.State != ledger.StateClosed || in.Deleting[m.ID] || in.Pinned[m.ID] || m.ClosedAt > closedBy {
			continue
		}
		below := m.HasOffsets() && m.EndOffset <= start
		snapshotsOnly := !m.HasOffsets() && (m.Kind == ledger.KindIngest || m.ID < lastBelow[m.WriterIncarnation])
		oldCheckpoint := m.Kind == ledger.KindCheckpoint && m.ID < in.CheckpointFirst && m.ID != in.CheckpointLedger
		if below || snapshotsOnly || oldCheckpoint {
			out = append(out, m)
		}
	}
	slices.SortFunc(out, func(a, b ledger.Metadata) int { return cmp.Compare(a.ID, b.ID) })
	return out
}
