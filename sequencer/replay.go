package sequencer

import (
	"fmt"
	"slices"
)

// EpochRecord is a confirmed commit record tagged with the epoch of the
// leader that wrote it.
type EpochRecord struct {
	Epoch uint64
	Record
}

// CommitMap is what a replay of commit-log entries yields.
type CommitMap struct {
	// C is the highest Watermark found: every offset below it is resolved
	// by the records.
	C uint64
	// Epoch is the highest epoch among the entries.
	Epoch uint64
	// Records are the Written and Hole records in log order: those below
	// C, then the latest epoch's records from C on (see apply).
	Records []EpochRecord
}

// Replay decodes commit-log entry payloads in log order (the confirmed
// entries of each commit ledger, older ledgers first). A reader replaying a
// commit ledger must stop at its LAC; a new leader replays the ledgers it
// recovered, up to their last entry.
func Replay(entries [][]byte) (CommitMap, error) {
	var cm CommitMap
	if err := cm.replay(entries); err != nil {
		return CommitMap{}, err
	}
	return cm, nil
}

// replay folds more entries, those that follow the ones cm holds, into
// cm. Every entry is decoded first: on an error cm is unchanged.
func (cm *CommitMap) replay(entries [][]byte) error {
	type decoded struct {
		epoch   uint64
		records []Record
	}
	all := make([]decoded, len(entries))
	for i, p := range entries {
		epoch, records, err := DecodeCommitEntry(p)
		if err != nil {
			return fmt.Errorf("commit entry %d: %w", i, err)
		}
		all[i] = decoded{epoch, records}
	}
	for _, d := range all {
		cm.apply(d.epoch, d.records)
	}
	return nil
}

func (cm *CommitMap) apply(epoch uint64, records []Record) {
	if epoch > cm.Epoch {
		// A newer leader decided every offset from C on again, from the
		// ledgers themselves (its takeover, DESIGN §5), and its records may
		// be shaped differently from the older epochs' there: one hole over
		// [C₀, R) where an older epoch had confirmed a smaller one above
		// its C. Both kept would overlap, and a reader refuses overlapping
		// records. So the older records from C on go, as a reader drops its
		// own segments at or above C when a newer epoch's stream starts.
		cm.Records = slices.DeleteFunc(cm.Records, func(r EpochRecord) bool { return r.Range.First >= cm.C })
		cm.Epoch = epoch
	}
	for _, r := range records {
		if r.Kind == KindWatermark {
			cm.C = max(cm.C, r.Watermark)
			continue
		}
		r.Seq = 0
		cm.Records = append(cm.Records, EpochRecord{Epoch: epoch, Record: r})
	}
}

// Settled returns the records that decide offsets below C, in log order. A
// new leader serves these from its replay; [C, R) it decides again itself.
func (cm CommitMap) Settled() []EpochRecord {
	return slices.DeleteFunc(slices.Clone(cm.Records), func(r EpochRecord) bool { return r.Range.First >= cm.C })
}
